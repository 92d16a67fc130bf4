package schema_test

import (
	"errors"
	"testing"

	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/schema"
)

func TestCheckHealth(t *testing.T) {
	node, err := sign.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	other, err := sign.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"node_id":"n1","nonce":"abc123"}` + "\n")
	id := node.PublicString()
	if err := schema.CheckHealth(body, schema.SignHealth(node, body), id, "abc123"); err != nil {
		t.Fatalf("the node's own answer: %v", err)
	}
	for name, c := range map[string]struct {
		body       []byte
		sig, nonce string
	}{
		"unsigned":     {body, "", "abc123"},
		"not base64":   {body, "%%%", "abc123"},
		"another key":  {body, schema.SignHealth(other, body), "abc123"},
		"altered body": {[]byte(`{"node_id":"n2","nonce":"abc123"}` + "\n"), schema.SignHealth(node, body), "abc123"},
		"replay":       {body, schema.SignHealth(node, body), "fresh"},
	} {
		if err := schema.CheckHealth(c.body, c.sig, id, c.nonce); !errors.Is(err, schema.ErrUnsigned) {
			t.Errorf("%s: %v, want ErrUnsigned", name, err)
		}
	}
}

func TestOwes(t *testing.T) {
	h := &schema.Health{
		Pending:     []manifests.ServiceAction{{Unit: "a.service"}},
		Reboot:      []manifests.ServiceAction{{Unit: "b.service"}},
		LastFailure: &manifests.LedgerEntry{Done: []manifests.ServiceAction{{Unit: "c.service"}}},
	}
	for unit, want := range map[string]bool{"a.service": true, "b.service": true, "c.service": true, "d.service": false} {
		if got := h.Owes(unit); got != want {
			t.Errorf("Owes(%s) = %v, want %v", unit, got, want)
		}
	}
}
