package systemd

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/strata-dev/strata/manifests"
)

// showProperties are the properties Systemctl asks `systemctl show` for.
// None of them can contain a newline.
const showProperties = "Id,Names,LoadState,ActiveState,SubState,Type,MainPID,RefuseManualStart,RefuseManualStop,CanReload,UnitFileState,InvocationID,StateChangeTimestampMonotonic"

// parseShow parses the output of `systemctl show -p showProperties --
// UNIT...`: records of KEY=VALUE lines separated by blank lines, in any
// property order, with properties a unit type lacks left out. A record
// whose Id is not a valid unit name is dropped (it could not be named on
// a command line); so are alias names that are not valid. Unknown keys
// are ignored. A line without '=', a record without Id, a bad number or
// boolean is an ErrParse.
func parseShow(out string) ([]Unit, error) {
	var units []Unit
	var cur *Unit
	var seen bool
	flush := func(line int) error {
		if !seen {
			return nil
		}
		seen = false
		if cur.ID == "" {
			return fmt.Errorf("%w: record ending at line %d has no Id", ErrParse, line)
		}
		if manifests.ValidUnit(cur.ID) {
			units = append(units, *cur)
		}
		return nil
	}
	lines := strings.Split(out, "\n")
	for i, line := range lines {
		line = strings.TrimSuffix(line, "\r")
		if line == "" {
			if err := flush(i + 1); err != nil {
				return nil, err
			}
			continue
		}
		if !seen {
			cur, seen = &Unit{}, true
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%w: line %d: no '=' in %.80q", ErrParse, i+1, line)
		}
		if err := setProperty(cur, key, val); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrParse, i+1, err)
		}
	}
	if err := flush(len(lines)); err != nil {
		return nil, err
	}
	return units, nil
}

func setProperty(u *Unit, key, val string) error {
	var err error
	switch key {
	case "Id":
		u.ID = val
	case "Names":
		u.Names = nil
		for _, n := range splitWords(val) {
			if manifests.ValidUnit(n) {
				u.Names = append(u.Names, n)
			}
		}
	case "LoadState":
		u.LoadState = val
	case "ActiveState":
		u.ActiveState = val
	case "SubState":
		u.SubState = val
	case "Type":
		u.Type = val
	case "MainPID":
		u.MainPID, err = strconv.Atoi(val)
		if err == nil && u.MainPID < 0 {
			err = fmt.Errorf("negative MainPID %d", u.MainPID)
		}
	case "RefuseManualStart":
		u.RefuseManualStart, err = parseBool(val)
	case "RefuseManualStop":
		u.RefuseManualStop, err = parseBool(val)
	case "CanReload":
		u.CanReload, err = parseBool(val)
	case "UnitFileState":
		u.UnitFileState = val
	case "InvocationID":
		// What restarts need never depends on these two: a value that
		// does not parse is left out, not an error.
		if validInvocation(val) {
			u.InvocationID = val
		}
	case "StateChangeTimestampMonotonic":
		if v, perr := strconv.ParseUint(val, 10, 64); perr == nil {
			u.StateChangeMonotonic = v
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// splitWords splits a list property the way systemctl show prints it:
// space-separated words, a word with special characters (a backslash, as
// in "dev-disk-by\\x2duuid-1.device") double-quoted with C escapes. A
// word that does not unquote is dropped.
func splitWords(s string) []string {
	var words []string
	for i := 0; i < len(s); {
		if s[i] == ' ' || s[i] == '\t' {
			i++
			continue
		}
		j := i
		if s[i] == '"' {
			for j = i + 1; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' {
					j++
				}
			}
			j = min(j+1, len(s))
			if w, err := strconv.Unquote(s[i:j]); err == nil {
				words = append(words, w)
			}
		} else {
			for j < len(s) && s[j] != ' ' && s[j] != '\t' {
				j++
			}
			words = append(words, s[i:j])
		}
		i = j
	}
	return words
}

func parseBool(s string) (bool, error) {
	switch s {
	case "yes":
		return true, nil
	case "no":
		return false, nil
	}
	return false, fmt.Errorf("not yes or no: %.40q", s)
}

// parseListUnits returns the unit names of `systemctl list-units --all
// --plain --no-legend --full` output: the first field of each line (after
// a status mark, which --plain should already omit). Names that are not
// valid unit names are dropped.
func parseListUnits(out string) []string {
	var names []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && (f[0] == "●" || f[0] == "*" || f[0] == "○") {
			f = f[1:]
		}
		if len(f) > 0 && manifests.ValidUnit(f[0]) {
			names = append(names, f[0])
		}
	}
	return names
}

// validInvocation reports whether s is an invocation id: 32 lower-case
// hex digits.
func validInvocation(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
