package fleet

import (
	"errors"
	"testing"
)

func TestParseInventory(t *testing.T) {
	inv, err := ParseInventory([]byte(`nodes:
  - name: web1
    address: web1.example.net
    user: root
    groups: [web]
    health: http://web1.example.net:9411/health
  - name: db1
    address: 10.0.0.5:2222
`))
	if err != nil || len(inv.Nodes) != 2 || len(inv.Select("web")) != 1 || len(inv.Select("")) != 2 {
		t.Fatalf("ParseInventory: %+v, %v", inv, err)
	}
	if h, p, err := SplitAddress("10.0.0.5:2222"); err != nil || h != "10.0.0.5" || p != 2222 {
		t.Errorf("SplitAddress: %s %d %v", h, p, err)
	}
	if h, p, err := SplitAddress("web1"); err != nil || h != "web1" || p != 22 {
		t.Errorf("SplitAddress: %s %d %v", h, p, err)
	}
	for name, doc := range map[string]string{
		"empty":          ``,
		"unknown field":  "nodes:\n  - name: a\n    adress: x\n",
		"duplicate":      "nodes:\n  - name: a\n  - name: a\n",
		"option as host": "nodes:\n  - name: a\n    address: -oProxyCommand=sh\n",
		"shell in host":  "nodes:\n  - name: a\n    address: 'h;reboot'\n",
		"bad port":       "nodes:\n  - name: a\n    address: h:99999\n",
		"option as user": "nodes:\n  - name: a\n    user: -lroot\n",
		"bad name":       "nodes:\n  - name: 'a b'\n",
		"bad group":      "nodes:\n  - name: a\n    groups: ['$(x)']\n",
		"health scheme":  "nodes:\n  - name: a\n    health: file:///etc/passwd\n",
		"health creds":   "nodes:\n  - name: a\n    health: http://u:p@h/health\n",
		"not a list":     "nodes: 3\n",
		"bad identity":   "nodes:\n  - name: a\n    health: http://h/health\n    identity: not-a-key\n",
		"identity alone": "nodes:\n  - name: a\n    identity: RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3\n",
	} {
		if _, err := ParseInventory([]byte(doc)); !errors.Is(err, ErrInventory) {
			t.Errorf("%s: %v, want ErrInventory", name, err)
		}
	}
}
