package builder

import (
	"strings"
	"testing"
)

// argvScript is derived from chrootScript by two replacements; if either
// stopped matching, commands would silently run through a shell again.
func TestArgvScriptDerived(t *testing.T) {
	if !strings.Contains(argvScript, "root=$1\nshift\n") || !strings.Contains(argvScript, `chroot "$root" "$@"`) || strings.Contains(argvScript, `/bin/sh -c "$2"`) {
		t.Fatalf("argvScript is not chrootScript running argv:\n%s", argvScript)
	}
}
