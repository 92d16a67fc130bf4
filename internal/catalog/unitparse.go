package catalog

import "strings"

// unitEntry is one assignment of a unit file.
type unitEntry struct {
	Section string
	Key     string
	Value   string
}

// parseUnit reads systemd unit-file syntax: [Section] headers, Key=Value
// assignments, comment lines starting with '#' or ';' and lines continued
// by a trailing backslash (comment lines inside a continued line are
// skipped, as systemd does). Lines that are neither are ignored, as systemd
// ignores them with a warning. It never fails.
func parseUnit(data []byte) []unitEntry {
	var (
		out     []unitEntry
		section string
		buf     strings.Builder
		pending bool
	)
	handle := func(line string) {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case line[0] == '[':
			if strings.HasSuffix(line, "]") && len(line) >= 2 {
				section = line[1 : len(line)-1]
			}
		default:
			key, value, ok := strings.Cut(line, "=")
			key = strings.TrimSpace(key)
			if ok && key != "" {
				out = append(out, unitEntry{Section: section, Key: key, Value: strings.TrimSpace(value)})
			}
		}
	}
	for raw := range strings.SplitSeq(string(data), "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		if !pending && line == "" {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			buf.WriteString(line[:len(line)-1])
			buf.WriteByte(' ')
			pending = true
			continue
		}
		buf.WriteString(line)
		handle(buf.String())
		buf.Reset()
		pending = false
	}
	if pending {
		handle(buf.String())
	}
	return out
}

// execKeys are the [Service] keys whose first word is a program to run.
var execKeys = map[string]bool{
	"ExecStart":     true,
	"ExecStartPre":  true,
	"ExecStartPost": true,
	"ExecReload":    true,
}

// execProgram returns the program of an Exec line: the first word after
// the special prefixes "@-:+!" (in any combination), with simple quotes
// removed. It returns "" for an empty line.
func execProgram(v string) string {
	v = strings.TrimLeft(strings.TrimSpace(v), "@-:+!")
	return firstWord(v)
}

// firstWord returns the first whitespace-separated word of s; a word
// opening with a single or double quote runs to the matching quote.
func firstWord(s string) string {
	s = strings.TrimLeft(s, " \t")
	if s == "" {
		return ""
	}
	if q := s[0]; q == '"' || q == '\'' {
		w, _, _ := strings.Cut(s[1:], string(q))
		return w
	}
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		return s[:i]
	}
	return s
}

// unitConfig is what the catalog needs from a unit's effective definition
// and drop-ins.
type unitConfig struct {
	exec        map[string][]string // Exec key -> programs
	paths       []string            // X-Strata-Paths values
	reloadPaths []string            // X-Strata-Reload-Paths values
}

// apply folds the entries of one file into c, in order. An empty
// assignment resets the list of its key, as systemd does for Exec lines.
func (c *unitConfig) apply(entries []unitEntry) {
	if c.exec == nil {
		c.exec = map[string][]string{}
	}
	for _, e := range entries {
		switch {
		case e.Section == "Service" && execKeys[e.Key]:
			if p := execProgram(e.Value); p != "" {
				c.exec[e.Key] = append(c.exec[e.Key], p)
			} else if e.Value == "" {
				c.exec[e.Key] = nil
			}
		case (e.Section == "Unit" || e.Section == "Service") && e.Key == "X-Strata-Paths":
			c.paths = appendFields(c.paths, e.Value)
		case (e.Section == "Unit" || e.Section == "Service") && e.Key == "X-Strata-Reload-Paths":
			c.reloadPaths = appendFields(c.reloadPaths, e.Value)
		}
	}
}

func appendFields(list []string, v string) []string {
	if v == "" {
		return nil
	}
	return append(list, strings.Fields(v)...)
}

// programs returns every program of c's Exec lines.
func (c *unitConfig) programs() []string {
	var out []string
	for _, k := range []string{"ExecStartPre", "ExecStart", "ExecStartPost", "ExecReload"} {
		out = append(out, c.exec[k]...)
	}
	return out
}
