package decodeerr

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/strata-dev/strata/manifests"
)

var (
	yamlUnknown = regexp.MustCompile(`field (\S+) not found in type \S+`)
	yamlType    = regexp.MustCompile("cannot unmarshal !!(\\w+) `(.*)` into (\\S+)")
	yamlTypeAny = regexp.MustCompile(`cannot unmarshal !!(\w+) into (\S+)`)
	yamlInteger = regexp.MustCompile(`^-?[0-9]+(\.\.\.)?$`)
)

// YAML rewrites an error of a YAML decoder: unknown keys and values of
// the wrong kind, each with its line. Other errors pass unchanged.
func YAML(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		m = yamlUnknown.ReplaceAllString(m, `unknown key "$1"`)
		if s := yamlType.FindStringSubmatch(m); s != nil && yamlInteger.MatchString(s[2]) && manifests.ValueKind(s[3]) == "a whole number" {
			// A whole number where one is expected: it does not fit (the
			// decoder took it for a float, shortened).
			m = strings.Replace(m, s[0], fmt.Sprintf("the number %s is out of range", s[2]), 1)
		} else if s != nil {
			m = strings.Replace(m, s[0], fmt.Sprintf("%q is %s where %s is expected", s[2], yamlKind(s[1]), manifests.ValueKind(s[3])), 1)
		} else if s := yamlTypeAny.FindStringSubmatch(m); s != nil {
			m = strings.Replace(m, s[0], fmt.Sprintf("%s where %s is expected", yamlKind(s[1]), manifests.ValueKind(s[2])), 1)
		}
		msgs[i] = m
	}
	return errors.New(strings.Join(msgs, "; "))
}

func yamlKind(tag string) string {
	switch tag {
	case "str":
		return "a string"
	case "int", "float":
		return "a number"
	case "bool":
		return "true or false"
	case "seq":
		return "a list"
	case "map":
		return "a mapping"
	case "null":
		return "empty"
	}
	return "a " + tag
}
