package catalog

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseUnit(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []unitEntry
	}{
		{"empty", "", nil},
		{
			"sections and comments",
			"# comment\n[Unit]\nDescription = Demo \n; other\n[Service]\nExecStart=/usr/bin/demo -x\n",
			[]unitEntry{{"Unit", "Description", "Demo"}, {"Service", "ExecStart", "/usr/bin/demo -x"}},
		},
		{
			"continuation",
			"[Service]\nExecStart=/usr/bin/demo \\\n  --flag \\\n# skipped comment\n  --other\nType=simple\n",
			[]unitEntry{{"Service", "ExecStart", "/usr/bin/demo  --flag  --other"}, {"Service", "Type", "simple"}},
		},
		{
			"continuation at end of file",
			"[Service]\nExecStart=/a \\",
			[]unitEntry{{"Service", "ExecStart", "/a"}},
		},
		{
			"CRLF and junk lines",
			"[Service]\r\nnot an assignment\r\n=novalue\r\nKey=a=b\r\n[broken\r\n",
			[]unitEntry{{"Service", "Key", "a=b"}},
		},
		{
			"empty value",
			"[Service]\nExecStart=\n",
			[]unitEntry{{"Service", "ExecStart", ""}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseUnit([]byte(tt.in)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseUnit(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestExecProgram(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/usr/bin/demo --x", "/usr/bin/demo"},
		{"-/usr/bin/demo", "/usr/bin/demo"},
		{"@-+!!:/usr/bin/demo argv0", "/usr/bin/demo"},
		{`"/opt/my app/bin" -x`, "/opt/my app/bin"},
		{`-'/opt/q'`, "/opt/q"},
		{`"/unterminated`, "/unterminated"},
		{"kill -HUP $MAINPID", "kill"},
		{"\t/usr/bin/tab\targ", "/usr/bin/tab"},
		{"", ""},
		{"-", ""},
	}
	for _, tt := range tests {
		if got := execProgram(tt.in); got != tt.want {
			t.Errorf("execProgram(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestUnitConfigReset(t *testing.T) {
	var c unitConfig
	c.apply(parseUnit([]byte("[Service]\nExecStart=/a\nExecReload=/r\nX-Strata-Paths=/etc/a /etc/b\n")))
	c.apply(parseUnit([]byte("[Service]\nExecStart=\nExecStart=/b\n[Unit]\nX-Strata-Paths=/etc/c\nX-Strata-Reload-Paths=/etc/r\n[Install]\nX-Strata-Paths=/ignored\n")))
	if got, want := c.programs(), []string{"/b", "/r"}; !reflect.DeepEqual(got, want) {
		t.Errorf("programs = %q, want %q", got, want)
	}
	if want := []string{"/etc/a", "/etc/b", "/etc/c"}; !reflect.DeepEqual(c.paths, want) {
		t.Errorf("paths = %q, want %q", c.paths, want)
	}
	if want := []string{"/etc/r"}; !reflect.DeepEqual(c.reloadPaths, want) {
		t.Errorf("reloadPaths = %q, want %q", c.reloadPaths, want)
	}
}

func FuzzParseUnit(f *testing.F) {
	f.Add([]byte("[Unit]\nX-Strata-Paths=/etc/a /etc/b\n[Service]\nExecStart=-@/usr/bin/x y \\\n z\n"))
	f.Add([]byte("\\\n\\\n[\n]\n=\n#\\\n;x=y"))
	f.Add([]byte("[Service]\r\nExecStart=\"/a b\r\nExecReload='"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries := parseUnit(data)
		for _, e := range entries {
			if e.Key == "" || strings.ContainsAny(e.Key, "=\n") || strings.Contains(e.Value, "\n") || strings.Contains(e.Section, "\n") {
				t.Fatalf("malformed entry %q from %q", e, data)
			}
			if e.Key != strings.TrimSpace(e.Key) || e.Value != strings.TrimSpace(e.Value) {
				t.Fatalf("untrimmed entry %q", e)
			}
			if p := execProgram(e.Value); len(p) > len(e.Value) {
				t.Fatalf("execProgram(%q) = %q grew", e.Value, p)
			}
		}
		var c unitConfig
		c.apply(entries)
		_ = c.programs()
	})
}
