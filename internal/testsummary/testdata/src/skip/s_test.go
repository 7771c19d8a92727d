package skip

import (
	"fmt"
	"testing"
)

func TestBrowser(t *testing.T) {
	fmt.Println("SKIP: chromium is not installed (apt-get install chromium)")
	t.Skip("chromium is not installed (apt-get install chromium)")
}
func TestDesign(t *testing.T) { t.Skip("by design: parent-death signals are Linux only") }
func TestMulti(t *testing.T)  { t.Skipf("aria2c is missing\n(apt-get install aria2); CI installs it") }
func TestRuns(t *testing.T)   {}
