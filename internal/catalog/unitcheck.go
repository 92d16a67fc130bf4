package catalog

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/strata-dev/strata/manifests"
)

// CheckUnit reports the first line of a unit file (or drop-in) that
// systemd would ignore with a warning: an assignment before any
// [Section], a line that is neither a section header, an assignment nor
// a comment, a malformed header or key, or text that is not UTF-8. It is
// the syntax check `strata config` runs before publishing one, where
// parseUnit (what planning reads) forgives.
func CheckUnit(data []byte) error {
	if !utf8.Valid(data) {
		return fmt.Errorf("%w: not UTF-8 text", manifests.ErrInvalid)
	}
	section := ""
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		n := i + 1
		line := strings.TrimSpace(lines[i])
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, ";") {
			i++
			next := strings.TrimSpace(lines[i])
			if strings.HasPrefix(next, "#") || strings.HasPrefix(next, ";") {
				line = line[:len(line)-1] + "\\" // a comment inside a continued line is skipped
				continue
			}
			line = line[:len(line)-1] + " " + next
		}
		switch {
		case line == "", line[0] == '#', line[0] == ';':
		case line[0] == '[':
			if !strings.HasSuffix(line, "]") || len(line) < 3 || strings.ContainsAny(line[1:len(line)-1], "[]") {
				return fmt.Errorf("%w: line %d: %q is not a [Section] header", manifests.ErrInvalid, n, line)
			}
			section = line[1 : len(line)-1]
		default:
			key, _, ok := strings.Cut(line, "=")
			key = strings.TrimSpace(key)
			switch {
			case !ok:
				return fmt.Errorf("%w: line %d: %q is not Key=Value", manifests.ErrInvalid, n, line)
			case section == "":
				return fmt.Errorf("%w: line %d: %s= before any [Section]", manifests.ErrInvalid, n, key)
			case !validKey(key):
				return fmt.Errorf("%w: line %d: %q is not a valid key", manifests.ErrInvalid, n, key)
			}
		}
	}
	return nil
}

func validKey(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
