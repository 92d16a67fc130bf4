package testnode

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// UnitState is what `systemctl show` says about a unit; enough to tell
// whether it was restarted (new InvocationID, MainPID and start time) or
// only reloaded (same ones).
type UnitState struct {
	Name         string // Id
	LoadState    string
	ActiveState  string
	SubState     string
	MainPID      int // as seen inside the node
	InvocationID string
	// ExecMainStartTimestamp is systemd's text; the monotonic form (µs)
	// is the one to compare.
	ExecMainStartTimestamp          string
	ExecMainStartTimestampMonotonic uint64
	NRestarts                       int
}

// showProps are the properties Unit and Units ask for.
const showProps = "Id,LoadState,ActiveState,SubState,MainPID,InvocationID,ExecMainStartTimestamp,ExecMainStartTimestampMonotonic,NRestarts"

// Unit returns the state of one unit.
func (n *Node) Unit(ctx context.Context, name string) (UnitState, error) {
	out, _, err := n.Exec(ctx, "systemctl", "show", "--no-pager", "-p", showProps, "--", name)
	if err != nil {
		return UnitState{}, err
	}
	units, err := parseShow(string(out))
	if err != nil || len(units) != 1 {
		return UnitState{}, fmt.Errorf("testnode: systemctl show %s on node %s: %d units, %v", name, n.cfg.Name, len(units), err)
	}
	return units[0], nil
}

// Units returns the state of every loaded service of the node, by name.
func (n *Node) Units(ctx context.Context) (map[string]UnitState, error) {
	out, _, err := n.Exec(ctx, "systemctl", "show", "--no-pager", "-p", showProps, "--", "*.service")
	if err != nil {
		return nil, err
	}
	units, err := parseShow(string(out))
	if err != nil {
		return nil, fmt.Errorf("testnode: systemctl show on node %s: %w", n.cfg.Name, err)
	}
	m := make(map[string]UnitState, len(units))
	for _, u := range units {
		m[u.Name] = u
	}
	return m, nil
}

// parseShow parses `systemctl show -p ...` output: blocks of KEY=VALUE
// lines separated by blank lines, one block per unit.
func parseShow(out string) ([]UnitState, error) {
	var units []UnitState
	var cur *UnitState
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		if line == "" {
			cur = nil
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("parsing systemctl show: line %q", line)
		}
		if cur == nil {
			units = append(units, UnitState{})
			cur = &units[len(units)-1]
		}
		var err error
		switch k {
		case "Id":
			cur.Name = v
		case "LoadState":
			cur.LoadState = v
		case "ActiveState":
			cur.ActiveState = v
		case "SubState":
			cur.SubState = v
		case "MainPID":
			cur.MainPID, err = strconv.Atoi(v)
		case "InvocationID":
			cur.InvocationID = v
		case "ExecMainStartTimestamp":
			cur.ExecMainStartTimestamp = v
		case "ExecMainStartTimestampMonotonic":
			cur.ExecMainStartTimestampMonotonic, err = strconv.ParseUint(v, 10, 64)
		case "NRestarts":
			cur.NRestarts, err = strconv.Atoi(v)
		}
		if err != nil {
			return nil, fmt.Errorf("parsing systemctl show: %s: %w", line, err)
		}
	}
	for _, u := range units {
		if u.Name == "" {
			return nil, fmt.Errorf("parsing systemctl show: a unit without Id: %+v", u)
		}
	}
	return units, nil
}
