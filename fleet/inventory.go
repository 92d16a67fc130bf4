package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/strata-dev/strata/internal/decodeerr"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
)

// ErrInventory reports an inventory that is not well formed.
var ErrInventory = errors.New("invalid inventory")

// maxInventory bounds an inventory file.
const maxInventory = 8 << 20

// Inventory lists a fleet's nodes.
type Inventory struct {
	Nodes []Node `yaml:"nodes"`
}

// Node is one node of an inventory.
type Node struct {
	// Name identifies the node in reports.
	Name string `yaml:"name"`
	// Address is host or host:port for SSH (default port 22).
	Address string `yaml:"address"`
	// User is the SSH user.
	User   string   `yaml:"user"`
	Groups []string `yaml:"groups"`
	// Health is the agent's health URL (optional).
	Health string `yaml:"health"`
	// Identity is the node's identity key (minisign public key, one-line
	// base64, as its health and `strata status --json` show it), pinned:
	// an answer from Health must be signed by it, over a fresh nonce
	// (optional; without it the answer is taken on the network's word).
	Identity string `yaml:"identity"`
}

// LoadInventory reads and checks the inventory at path.
func LoadInventory(path string) (*Inventory, error) {
	b, err := safefile.Read(path, maxInventory)
	if err != nil {
		return nil, fmt.Errorf("reading inventory: %w", err)
	}
	inv, err := ParseInventory(b)
	if err != nil {
		return nil, fmt.Errorf("inventory %s: %w", path, err)
	}
	return inv, nil
}

// ParseInventory decodes an inventory strictly (unknown fields refused)
// and checks every node: a unique name of letters, digits, '.', '_' and
// '-'; an address that is a host name or IP with an optional port; a user
// name that cannot pass for an option; group names like node names; a
// health URL over http or https; an identity that is a public key.
func ParseInventory(b []byte) (*Inventory, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var inv Inventory
	if err := dec.Decode(&inv); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %v", ErrInventory, decodeerr.YAML(err))
	}
	if len(inv.Nodes) == 0 {
		return nil, fmt.Errorf("%w: no nodes", ErrInventory)
	}
	seen := map[string]bool{}
	for i, n := range inv.Nodes {
		where := fmt.Sprintf("node %d (%s)", i+1, n.Name)
		if !validName(n.Name) {
			return nil, fmt.Errorf("%w: %s: name must be letters, digits, '.', '_' or '-', not starting with '-'", ErrInventory, where)
		}
		if seen[n.Name] {
			return nil, fmt.Errorf("%w: %s: name used twice", ErrInventory, where)
		}
		seen[n.Name] = true
		if n.Address != "" {
			if _, _, err := SplitAddress(n.Address); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrInventory, where, err)
			}
		}
		if n.User != "" && !validName(n.User) {
			return nil, fmt.Errorf("%w: %s: user %q", ErrInventory, where, n.User)
		}
		for _, g := range n.Groups {
			if !validName(g) {
				return nil, fmt.Errorf("%w: %s: group %q", ErrInventory, where, g)
			}
		}
		if n.Health != "" {
			u, err := url.Parse(n.Health)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
				return nil, fmt.Errorf("%w: %s: health %q is not an http(s) URL", ErrInventory, where, n.Health)
			}
		}
		if n.Identity != "" {
			if _, err := sign.ParsePublic([]byte(n.Identity)); err != nil || strings.ContainsAny(n.Identity, "\r\n") {
				return nil, fmt.Errorf("%w: %s: identity is not a public key (one-line base64, as the node's health shows it)", ErrInventory, where)
			}
			if n.Health == "" {
				return nil, fmt.Errorf("%w: %s: identity without a health URL: it signs the agent's health", ErrInventory, where)
			}
		}
	}
	return &inv, nil
}

// SplitAddress splits an inventory address into host and port (22 when
// none is given), refusing what is neither a host name nor an IP address.
func SplitAddress(addr string) (string, int, error) {
	host, port := addr, 22
	if h, p, err := net.SplitHostPort(addr); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, fmt.Errorf("address %q: bad port", addr)
		}
		host, port = h, n
	}
	if net.ParseIP(host) != nil {
		return host, port, nil
	}
	if host == "" || len(host) > 253 || strings.HasPrefix(host, "-") || strings.HasPrefix(host, ".") {
		return "", 0, fmt.Errorf("address %q is not a host name", addr)
	}
	for _, c := range host {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return "", 0, fmt.Errorf("address %q is not a host name", addr)
		}
	}
	return host, port, nil
}

// Select returns the nodes in group (all when group is empty).
func (inv *Inventory) Select(group string) []Node {
	var out []Node
	for _, n := range inv.Nodes {
		if group == "" || contains(n.Groups, group) {
			out = append(out, n)
		}
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func validName(s string) bool {
	if s == "" || len(s) > 128 || s[0] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
