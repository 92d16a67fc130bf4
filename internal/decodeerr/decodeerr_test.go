package decodeerr_test

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/strata-dev/strata/internal/decodeerr"
)

type inner struct {
	Path  string   `yaml:"path" json:"path"`
	Mode  int      `yaml:"mode" json:"mode"`
	Tags  []string `yaml:"tags" json:"tags"`
	Quiet bool     `yaml:"quiet" json:"quiet"`
}

type OverlayManifest struct {
	Name  string        `yaml:"name" json:"name"`
	Wait  time.Duration `yaml:"wait" json:"wait"`
	Files []inner       `yaml:"files" json:"files"`
}

// No Go type or field name survives; each message names the line or key
// and the kind of value expected.
func TestMessages(t *testing.T) {
	yamlCases := map[string]string{
		"nme: x\n":                                    `line 1: unknown key "nme"`,
		"files:\n  - path: /x\n    mdoe: 1\n":         `line 3: unknown key "mdoe"`,
		"files:\n  - mode: abc\n":                     `line 2: "abc" is a string where a whole number is expected`,
		"files: x\n":                                  `line 1: "x" is a string where a list is expected`,
		"files:\n  - tags: a\n":                       `line 2: "a" is a string where a list is expected`,
		"files:\n  - quiet: 3\n":                      `line 2: "3" is a number where true or false is expected`,
		"files:\n  - x\n":                             `line 2: "x" is a string where a mapping (inner) is expected`,
		"files:\n  - mode: 99999999999999999999999\n": `line 2: the number 9999999... is out of range`,
	}
	for in, want := range yamlCases {
		var v OverlayManifest
		dec := yaml.NewDecoder(strings.NewReader(in))
		dec.KnownFields(true)
		err := decodeerr.YAML(dec.Decode(&v))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "decodeerr_test") || strings.Contains(err.Error(), "int") && !strings.Contains(want, "int") {
			t.Errorf("yaml %q: %v; want %q", in, err, want)
		}
	}
}
