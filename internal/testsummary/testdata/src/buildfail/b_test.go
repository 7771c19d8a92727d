package buildfail

import "testing"

func TestX(t *testing.T) { var x int = "s" }
