package manifests

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Rotation is what a key rotation overlay does to the keys its line
// trusts. The overlay is signed by a key trusted before it; the keys it
// adds are trusted, and the keys it revokes no longer are, for every
// overlay and index after it. On a node the change is the key files under
// KeysDir, which a rotation overlay, and nothing else, writes and deletes.
type Rotation struct {
	// Add lists public keys in minisign's one-line base64 form.
	Add []string `json:"add"`
	// Revoke lists key ids (16 upper-case hex digits, as minisign prints
	// them).
	Revoke []string `json:"revoke"`
}

// maxRotationKeys bounds the keys one rotation names.
const maxRotationKeys = 64

// KeyID returns the id of a minisign public key in one-line base64 form,
// as 16 upper-case hex digits, or an error if pub is not such a key.
func KeyID(pub string) (string, error) {
	id, err := keyID(pub)
	return fmt.Sprintf("%016X", id), err
}

func keyID(pub string) (uint64, error) {
	b, err := base64.StdEncoding.Strict().DecodeString(pub)
	if err != nil || len(b) != 42 || b[0] != 'E' || b[1] != 'd' {
		return 0, fmt.Errorf("%w: %q is not a minisign public key", ErrInvalid, clip(pub))
	}
	return binary.LittleEndian.Uint64(b[2:10]), nil
}

// ValidKeyID reports whether id is a key id as KeyID writes it.
func ValidKeyID(id string) bool {
	if len(id) != 16 || strings.ToUpper(id) != id {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// KeyPath returns the tree path of the trusted key file for key id.
func KeyPath(id string) string { return KeysDir + "/" + id + ".pub" }

// KeyFile returns the key file a node keeps for pub: minisign's .pub
// format, byte for byte as `minisign -G` and strata's builder write it.
func KeyFile(pub string) ([]byte, error) {
	id, err := keyID(pub)
	if err != nil {
		return nil, err
	}
	// minisign prints the id in the comment without leading zeros.
	short := strings.ToUpper(strconv.FormatUint(id, 16))
	return []byte("untrusted comment: minisign public key: " + short + "\n" + pub + "\n"), nil
}

// clip shortens what an error quotes from a hostile document.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// validate checks that the rotation is well formed and that m changes
// exactly its key files: for each added key, a root-owned 0644 file at
// KeyPath holding KeyFile; for each revoked key, the delete of its file;
// nothing else, and no restart.
func (r *Rotation) validate(m *OverlayManifest) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: key rotation %s: %s", ErrInvalid, m.Version, fmt.Sprintf(format, a...))
	}
	if len(r.Add)+len(r.Revoke) == 0 {
		return bad("adds and revokes no key")
	}
	if len(r.Add) > maxRotationKeys || len(r.Revoke) > maxRotationKeys {
		return bad("names more than %d keys", maxRotationKeys)
	}
	if len(m.Patches) > 0 {
		return bad("ships a patch; key files travel whole")
	}
	want := map[string]Entry{}
	for _, pub := range r.Add {
		id, err := KeyID(pub)
		if err != nil {
			return fmt.Errorf("key rotation %s: %w", m.Version, err)
		}
		text, _ := KeyFile(pub)
		sum := sha256.Sum256(text)
		p := KeyPath(id)
		if _, dup := want[p]; dup {
			return bad("adds key %s twice", id)
		}
		want[p] = Entry{Path: p, Type: TypeFile, Mode: 0o644, Size: int64(len(text)), SHA256: hex.EncodeToString(sum[:])}
	}
	if len(m.Entries) != len(want) {
		return bad("must write exactly the %d key files it adds, it writes %d entries", len(want), len(m.Entries))
	}
	for _, e := range m.Entries {
		if w, ok := want[e.Path]; !ok || e != w {
			return bad("entry /%s is not the key file of a key it adds (root-owned, 0644, the key's minisign .pub text)", e.Path)
		}
	}
	var deletes []string
	for _, id := range r.Revoke {
		if !ValidKeyID(id) {
			return bad("revoked key id %q is not 16 upper-case hex digits", clip(id))
		}
		if _, both := want[KeyPath(id)]; both {
			return bad("adds and revokes key %s", id)
		}
		deletes = append(deletes, KeyPath(id))
	}
	slices.Sort(deletes)
	if !slices.Equal(slices.Compact(slices.Clone(deletes)), deletes) {
		return bad("revokes a key twice")
	}
	if !slices.Equal(deletes, m.Deletes) {
		return bad("must delete exactly the key files it revokes")
	}
	if len(m.Services) > 0 || m.Catalog != nil {
		return bad("restarts services or changes the catalog; a rotation changes keys only")
	}
	return nil
}

// checkKeyFiles checks that the key files of an image's tree are exactly
// its keys, each a root-owned 0644 file holding KeyFile: a node trusts the
// files, an auditor reads the list, and they must not differ.
func checkKeyFiles(keys []string, files []Entry) error {
	want := map[string]string{}
	for _, pub := range keys {
		id, err := KeyID(pub)
		if err != nil {
			return fmt.Errorf("image keys: %w", err)
		}
		text, _ := KeyFile(pub)
		sum := sha256.Sum256(text)
		want[KeyPath(id)] = hex.EncodeToString(sum[:])
	}
	n := 0
	for _, e := range files {
		if !Within(e.Path, KeysDir) || e.Path == KeysDir {
			continue
		}
		sum, ok := want[e.Path]
		if !ok || e.SHA256 != sum || e.Mode != 0o644 || e.UID != 0 || e.GID != 0 {
			return fmt.Errorf("%w: image entry /%s is not the key file of a key the image lists (root-owned, 0644, the key's minisign .pub text)", ErrInvalid, e.Path)
		}
		n++
	}
	if n != len(want) {
		return fmt.Errorf("%w: image lists %d keys but has %d key files under /%s", ErrInvalid, len(want), n, KeysDir)
	}
	return nil
}
