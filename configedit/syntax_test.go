package configedit

import (
	"errors"
	"testing"
)

func TestCheckSyntax(t *testing.T) {
	for _, tc := range []struct {
		path, content string
		ok            bool
	}{
		{"etc/a.json", `{"a": [1, 2]}`, true},
		{"etc/a.json", `{"a": 1,}`, false},
		{"etc/a.json", `{"a": 1} {"b": 2}`, false},
		{"etc/a.yaml", "a: 1\n---\nb: [2]\n", true},
		{"etc/a.yml", "a: [1\n", false},
		{"etc/a.toml", "[server]\nport = 80\n", true},
		{"etc/a.toml", "port = \n", false},
		{"etc/systemd/system/x.service", "[Service]\nExecStart=/bin/true\n", true},
		{"etc/systemd/system/x.service", "ExecStart=/bin/true\n", false},
		{"etc/systemd/system/x.service.d/override.conf", "[Service]\nRestart always\n", false},
		{"etc/nginx/nginx.conf", "anything { goes", true}, // unknown format: the service's validation decides
	} {
		err := CheckSyntax(tc.path, []byte(tc.content))
		if tc.ok && err != nil {
			t.Errorf("%s %q: %v", tc.path, tc.content, err)
		}
		if !tc.ok && !errors.Is(err, ErrSyntax) {
			t.Errorf("%s %q: %v, want ErrSyntax", tc.path, tc.content, err)
		}
	}
	if Format("etc/app/conf.d/x.conf") != "" || Format("usr/lib/systemd/system/y.socket") != "systemd-unit" || Format("etc/app/site.link") != "" {
		t.Error("Format")
	}
}
