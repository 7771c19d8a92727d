package timeout

import (
	"testing"
	"time"
)

func TestFast(t *testing.T)  {}
func TestHangs(t *testing.T) { time.Sleep(time.Minute) }
