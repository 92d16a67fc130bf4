package overlay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/strata-dev/strata/manifests"
)

// ErrUnknownOwner reports an --owner name the line's head does not know.
var ErrUnknownOwner = errors.New("overlay: unknown owner")

// maxAccountFile bounds the /etc/passwd or /etc/group read to resolve
// owner names.
const maxAccountFile = 8 << 20

// resolveOwners sets the UID and GID of the adds that name their owner
// (Add.User, Add.Group) from the head's /etc/passwd and /etc/group: the
// names the nodes resolve, not those of the host the overlay is made on.
func resolveOwners(ctx context.Context, c *Chain, adds []Add) error {
	ids := map[string]map[string]int{}
	lookup := func(file, name string) (int, error) {
		if ids[file] == nil {
			m, err := accounts(ctx, c, file)
			if err != nil {
				return 0, err
			}
			ids[file] = m
		}
		id, ok := ids[file][name]
		if !ok {
			return 0, fmt.Errorf("--owner: /%s of line %s at %s has no %q; give a name it lists or a number: %w", file, c.Line.Name, c.Head().Version, name, ErrUnknownOwner)
		}
		return id, nil
	}
	for i := range adds {
		a := &adds[i]
		var err error
		if a.User != "" {
			if a.UID, err = lookup("etc/passwd", a.User); err != nil {
				return err
			}
		}
		if a.Group != "" {
			if a.GID, err = lookup("etc/group", a.Group); err != nil {
				return err
			}
		}
	}
	return nil
}

// accounts reads the head's file (etc/passwd or etc/group) as a map from
// name to its numeric id, the third field.
func accounts(ctx context.Context, c *Chain, file string) (map[string]int, error) {
	e, ok := c.State[file]
	if !ok || e.Type != manifests.TypeFile {
		return nil, fmt.Errorf("--owner: line %s has no regular file /%s at %s to resolve names with; give numbers: %w", c.Line.Name, file, c.Head().Version, ErrUnknownOwner)
	}
	if e.Size > maxAccountFile {
		return nil, fmt.Errorf("--owner: /%s of line %s is %d bytes, more than %d: %w", file, c.Line.Name, e.Size, maxAccountFile, ErrUnknownOwner)
	}
	b, err := chainContent(ctx, c, e)
	if err != nil {
		return nil, fmt.Errorf("--owner: reading /%s: %w", file, err)
	}
	return parseAccounts(b), nil
}

// parseAccounts maps each name of a passwd or group file to its id; lines
// that do not parse (comments, NIS "+" entries) are skipped, and the first
// of duplicate names wins, as getpwnam's files backend does.
func parseAccounts(b []byte) map[string]int {
	m := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxAccountFile)
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) < 3 || f[0] == "" || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], "+") || strings.HasPrefix(f[0], "-") {
			continue
		}
		id, err := strconv.ParseUint(f[2], 10, 31)
		if _, dup := m[f[0]]; err != nil || dup {
			continue
		}
		m[f[0]] = int(id)
	}
	return m
}
