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
var ErrUnknownOwner = errors.New("unknown owner")

// maxAccountFile bounds the /etc/passwd or /etc/group read to resolve
// owner names.
const maxAccountFile = 8 << 20

// resolveOwners sets the UID and GID of the adds that name their owner
// (Add.User, Add.Group) from the head's /etc/passwd and /etc/group: the
// names the nodes resolve, not those of the host the overlay is made on.
func resolveOwners(ctx context.Context, c *Chain, adds []Add) error {
	files := map[string]*accountFile{}
	lookup := func(file, name string) (int, error) {
		if files[file] == nil {
			f, err := accounts(ctx, c, file)
			if err != nil {
				return 0, err
			}
			files[file] = f
		}
		f := files[file]
		if why, bad := f.bad[name]; bad {
			return 0, fmt.Errorf("--owner: /%s of line %s at %s %s; give a number: %w", file, c.Line.Name, c.Head().Version, why, ErrUnknownOwner)
		}
		id, ok := f.ids[name]
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

// accountFile is a passwd or group file: each name's id, and the names
// that cannot be resolved, with why.
type accountFile struct {
	ids map[string]int
	bad map[string]string
}

// accounts reads the head's file (etc/passwd or etc/group).
func accounts(ctx context.Context, c *Chain, file string) (*accountFile, error) {
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

// parseAccounts maps each name of a passwd or group file to its id, the
// third field. Comments and NIS ("+", "-") lines are skipped; a name
// listed twice, or whose id is not a number, cannot be resolved (strata
// does not guess which entry the node's libc would pick).
func parseAccounts(b []byte) *accountFile {
	f := &accountFile{ids: map[string]int{}, bad: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxAccountFile)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		name := fields[0]
		if name == "" || strings.HasPrefix(name, "#") || strings.HasPrefix(name, "+") || strings.HasPrefix(name, "-") {
			continue
		}
		if len(fields) < 3 {
			f.bad[name] = fmt.Sprintf("has an entry for %q without an id", name)
			continue
		}
		id, err := strconv.ParseUint(fields[2], 10, 31)
		switch {
		case err != nil:
			f.bad[name] = fmt.Sprintf("gives %q the id %q, which is not a whole number below 2^31", name, fields[2])
		case f.bad[name] != "":
		default:
			if prev, dup := f.ids[name]; dup && prev != int(id) {
				f.bad[name] = fmt.Sprintf("lists %q twice (ids %d and %d)", name, prev, id)
				delete(f.ids, name)
				continue
			}
			f.ids[name] = int(id)
		}
	}
	return f
}
