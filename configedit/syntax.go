package configedit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/BurntSushi/toml"
	"go.yaml.in/yaml/v3"

	"github.com/strata-dev/strata/internal/catalog"
	"github.com/strata-dev/strata/manifests"
)

// ErrSyntax reports a file that does not parse in its format.
var ErrSyntax = manifests.Rejection("syntax error")

// Format names the syntax CheckSyntax checks a path's content against:
// "json", "yaml", "toml", "systemd-unit", or "" for a format it does not
// know (the owning service's validation command is then the only check).
func Format(p string) string {
	base := path.Base(p)
	switch ext := path.Ext(base); ext {
	case ".json":
		return "json"
	case ".yaml", ".yml":
		return "yaml"
	case ".toml":
		return "toml"
	case ".service", ".socket", ".timer", ".mount", ".automount", ".swap", ".target", ".path", ".slice", ".scope",
		".network", ".netdev", ".link":
		// Unit files live in systemd's directories; elsewhere a name
		// like site.link is some other program's.
		if strings.Contains("/"+p, "/systemd/") {
			return "systemd-unit"
		}
	case ".conf":
		// Drop-ins: /etc/systemd/system/UNIT.d/NAME.conf and the like.
		if strings.Contains(p, "systemd/") && strings.HasSuffix(path.Dir(p), ".d") {
			return "systemd-unit"
		}
	}
	return ""
}

// CheckSyntax parses content as the format Format names for path p and
// returns an ErrSyntax error naming the problem; content of a format it
// does not know passes.
func CheckSyntax(p string, content []byte) error {
	var err error
	switch Format(p) {
	case "json":
		err = checkJSON(content)
	case "yaml":
		err = checkYAML(content)
	case "toml":
		var v map[string]any
		_, err = toml.Decode(string(content), &v)
	case "systemd-unit":
		err = catalog.CheckUnit(content)
	}
	if err != nil {
		return fmt.Errorf("%w: /%s (%s): %v", ErrSyntax, strings.TrimPrefix(p, "/"), Format(p), err)
	}
	return nil
}

// checkJSON accepts exactly one JSON value.
func checkJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("text after the JSON value")
	}
	return nil
}

// checkYAML accepts any number of YAML documents.
func checkYAML(b []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
