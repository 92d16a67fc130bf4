package catalog

import (
	"errors"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

func TestCheckUnit(t *testing.T) {
	good := []string{
		"[Unit]\nDescription=x\n\n[Service]\nExecStart=/usr/bin/x \\\n  --flag\n# comment\n; other\nX-Strata-Paths=/etc/a\n",
		"[Service]\nEnvironment=A=b\n",
		"",
		"# only comments\n",
	}
	for _, g := range good {
		if err := CheckUnit([]byte(g)); err != nil {
			t.Errorf("CheckUnit(%q) = %v", g, err)
		}
	}
	bad := map[string]string{
		"before section": "ExecStart=/x\n[Service]\n",
		"no equals":      "[Service]\nExecStart /usr/bin/x\n",
		"bad header":     "[Service\nA=b\n",
		"empty header":   "[]\n",
		"bad key":        "[Service]\nExec Start=/x\n",
		"binary":         "[Service]\nA=\xff\xfe\n",
	}
	for name, b := range bad {
		if err := CheckUnit([]byte(b)); !errors.Is(err, manifests.ErrInvalid) {
			t.Errorf("%s: CheckUnit = %v, want ErrInvalid", name, err)
		}
	}
}
