package efivars

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf16"
)

// ErrNotStore is wrapped by the error for input that is not an OVMF
// variable store: no firmware volume header, a volume that is not the
// NV data volume, a bad header checksum, or a variable store that is not
// an authenticated store in the formatted, healthy state.
var ErrNotStore = errors.New("not an OVMF variable store")

// ErrCorrupt is wrapped by the error for a store whose headers are right
// but whose variable records are not: a record that runs past the store,
// a malformed name, free space that is not erased.
var ErrCorrupt = errors.New("corrupt OVMF variable store")

// Record states. A state byte starts erased (0xFF) and the firmware only
// ever clears bits of it, so a record's states are cumulative: 0x7F
// (VAR_HEADER_VALID_ONLY) is a header written before its name and data,
// 0x3F once they are written.
const (
	// StateAdded (VAR_ADDED) is a complete, valid record.
	StateAdded = 0x3F
	// stateInDeletedTransition (VAR_IN_DELETED_TRANSITION) is cleared on
	// the old copy of a variable before its new copy is written.
	stateInDeletedTransition = 0xFE
	// stateDeleted (VAR_DELETED) is cleared on a deleted or replaced
	// copy.
	stateDeleted = 0xFD
)

// Layout of the flash file, as edk2 defines it
// (MdePkg/Include/Pi/PiFirmwareVolume.h,
// MdeModulePkg/Include/Guid/VariableFormat.h).
const (
	fvHeaderFixed   = 56 // EFI_FIRMWARE_VOLUME_HEADER up to the block map
	fvSignature     = "_FVH"
	fvRevision      = 2    // EFI_FVH_REVISION
	storeHeaderSize = 28   // VARIABLE_STORE_HEADER
	storeFormatted  = 0x5A // VARIABLE_STORE_FORMATTED
	storeHealthy    = 0xFE // VARIABLE_STORE_HEALTHY
	startID         = 0x55AA
	varHeaderSize   = 60 // AUTHENTICATED_VARIABLE_HEADER
	headerAlign     = 4  // HEADER_ALIGNMENT
	// maxNameSize bounds a variable name (in bytes, UTF-16 with the
	// NUL); edk2 has no fixed limit, but no variable of a sane store
	// comes near it.
	maxNameSize = 1024
)

// Variable is one record of a variable store, as List reads it. A store
// can hold several records of one variable: the firmware writes a new
// copy and marks the old one deleted; Live tells which one counts.
type Variable struct {
	// Name is the variable's name, without the terminating NUL.
	Name string
	// Vendor is the variable's vendor GUID.
	Vendor GUID
	// Attributes are the EFI_VARIABLE_* attributes (0x27 for PK, KEK,
	// db: non-volatile, boot service and runtime access, time-based
	// authenticated writes).
	Attributes uint32
	// State is the record's raw state byte (0x3F: added and valid;
	// 0x3E: being replaced; 0x3D, 0x3C: deleted; 0x7F: header only).
	State uint8
	// Offset is where the record's header starts in the store; Size is
	// the length of header, name and data (without the padding to the
	// next record), so the record is store[Offset:Offset+Size].
	Offset, Size int
	// Data is a copy of the variable's data.
	Data []byte
}

// Live reports whether the record holds the variable's current value:
// the firmware reads a record that is added and not deleted, including
// one whose replacement was interrupted.
func (v Variable) Live() bool {
	return v.State == StateAdded || v.State == StateAdded&stateInDeletedTransition
}

// layout is where the parts of a store are.
type layout struct {
	varsEnd int        // end of the variable store (its header's offset + its Size)
	free    int        // first byte after the last record
	maxVar  int        // the firmware's limit on one variable's record
	vars    []Variable // the records, in order
}

// List returns the records of the variable store in store, live or
// deleted, in the order they are on flash. A store that is not an OVMF
// authenticated variable store is ErrNotStore; malformed records, or
// free space that is not erased, ErrCorrupt.
func List(store []byte) ([]Variable, error) {
	l, err := parse(store)
	if err != nil {
		return nil, err
	}
	return l.vars, nil
}

// parse checks the headers of store and reads its records.
func parse(store []byte) (*layout, error) {
	le := binary.LittleEndian
	if len(store) < fvHeaderFixed {
		return nil, fmt.Errorf("ovmf vars: %d bytes, shorter than a firmware volume header: %w", len(store), ErrNotStore)
	}
	if string(store[0x28:0x2C]) != fvSignature {
		return nil, fmt.Errorf("ovmf vars: no firmware volume signature %q at 0x28: %w", fvSignature, ErrNotStore)
	}
	if fs := GUID(store[0x10:0x20]); fs != guidNVDataFV {
		return nil, fmt.Errorf("ovmf vars: firmware volume of file system %s, not the NV data volume %s: %w", fs, guidNVDataFV, ErrNotStore)
	}
	fvLen := le.Uint64(store[0x20:])
	hdrLen := int(le.Uint16(store[0x30:]))
	if rev := store[0x37]; rev != fvRevision {
		return nil, fmt.Errorf("ovmf vars: firmware volume header revision %d, not %d: %w", rev, fvRevision, ErrNotStore)
	}
	if fvLen > uint64(len(store)) {
		return nil, fmt.Errorf("ovmf vars: the firmware volume is %d bytes, the store %d (truncated?): %w", fvLen, len(store), ErrNotStore)
	}
	// The header ends with a block map of at least one entry and the
	// zero terminator (8 bytes each).
	if hdrLen < fvHeaderFixed+16 || hdrLen%2 != 0 || uint64(hdrLen)+storeHeaderSize > fvLen {
		return nil, fmt.Errorf("ovmf vars: firmware volume header length %d in a volume of %d bytes: %w", hdrLen, fvLen, ErrNotStore)
	}
	// OVMF checks this sum at boot and, if it is wrong, formats the
	// whole volume afresh, dropping every variable in it.
	var sum uint16
	for i := 0; i < hdrLen; i += 2 {
		sum += le.Uint16(store[i:])
	}
	if sum != 0 {
		return nil, fmt.Errorf("ovmf vars: firmware volume header checksum is wrong (sum %#04x): %w", sum, ErrNotStore)
	}

	s := hdrLen
	switch sig := GUID(store[s : s+16]); sig {
	case guidAuthVarStore:
	case guidVarStore:
		return nil, fmt.Errorf("ovmf vars: a store of plain variables (built without Secure Boot?), which cannot hold keys: %w", ErrNotStore)
	default:
		return nil, fmt.Errorf("ovmf vars: variable store signature %s, not %s: %w", sig, guidAuthVarStore, ErrNotStore)
	}
	size := uint64(le.Uint32(store[s+16:]))
	if f := store[s+20]; f != storeFormatted {
		return nil, fmt.Errorf("ovmf vars: variable store format %#02x, not %#02x: %w", f, storeFormatted, ErrNotStore)
	}
	if st := store[s+21]; st != storeHealthy {
		return nil, fmt.Errorf("ovmf vars: variable store state %#02x, not healthy (%#02x): %w", st, storeHealthy, ErrNotStore)
	}
	if size < storeHeaderSize || uint64(s)+size > fvLen {
		return nil, fmt.Errorf("ovmf vars: variable store of %d bytes at %#x in a volume of %d bytes: %w", size, s, fvLen, ErrNotStore)
	}
	l := &layout{varsEnd: s + int(size), maxVar: maxVariableSize(int(size))}

	off := s + storeHeaderSize
	for {
		off = alignUp(off)
		if off+2 > l.varsEnd || le.Uint16(store[off:]) != startID {
			break
		}
		v, err := readVariable(store, off, l.varsEnd)
		if err != nil {
			return nil, err
		}
		l.vars = append(l.vars, v)
		off += v.Size
	}
	if off > l.varsEnd {
		off = l.varsEnd
	}
	l.free = off
	// The firmware takes the first byte that does not start a record for
	// the start of free space and expects all of it erased.
	for j := off; j < l.varsEnd; j++ {
		if store[j] != 0xFF {
			return nil, fmt.Errorf("ovmf vars: free space after the last variable (%#x) is not erased at %#x: %w", off, j, ErrCorrupt)
		}
	}
	return l, nil
}

// readVariable reads the record at off, which starts with the start ID,
// bounded by end.
func readVariable(store []byte, off, end int) (Variable, error) {
	le := binary.LittleEndian
	if off+varHeaderSize > end {
		return Variable{}, fmt.Errorf("ovmf vars: variable header at %#x runs past the end of the store (%#x): %w", off, end, ErrCorrupt)
	}
	h := store[off : off+varHeaderSize]
	nameSize := uint64(le.Uint32(h[36:]))
	dataSize := uint64(le.Uint32(h[40:]))
	total := varHeaderSize + nameSize + dataSize
	if total > uint64(end-off) {
		return Variable{}, fmt.Errorf("ovmf vars: variable at %#x: name (%d bytes) and data (%d bytes) run past the end of the store (%#x): %w", off, nameSize, dataSize, end, ErrCorrupt)
	}
	v := Variable{
		Vendor:     GUID(h[44:60]),
		Attributes: le.Uint32(h[4:]),
		State:      h[2],
		Offset:     off,
		Size:       int(total),
	}
	nameStart := off + varHeaderSize
	name, err := decodeName(store[nameStart : nameStart+int(nameSize)])
	if err != nil {
		return Variable{}, fmt.Errorf("ovmf vars: variable at %#x: %v: %w", off, err, ErrCorrupt)
	}
	v.Name = name
	dataStart := nameStart + int(nameSize)
	v.Data = bytes.Clone(store[dataStart : dataStart+int(dataSize)])
	if v.Data == nil {
		v.Data = []byte{}
	}
	return v, nil
}

// decodeName decodes a UTF-16LE name with its NUL terminator.
func decodeName(b []byte) (string, error) {
	if len(b) < 2 || len(b)%2 != 0 || len(b) > maxNameSize {
		return "", fmt.Errorf("name of %d bytes", len(b))
	}
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	if u[len(u)-1] != 0 {
		return "", errors.New("name without its NUL terminator")
	}
	u = u[:len(u)-1]
	for _, c := range u {
		if c == 0 {
			return "", errors.New("NUL inside the name")
		}
	}
	return string(utf16.Decode(u)), nil
}

// encodeName encodes name as UTF-16LE with its NUL terminator.
func encodeName(name string) []byte {
	u := utf16.Encode([]rune(name))
	b := make([]byte, 2*len(u)+2)
	for i, c := range u {
		binary.LittleEndian.PutUint16(b[2*i:], c)
	}
	return b
}

// alignUp rounds off up to the records' alignment.
func alignUp(off int) int {
	return (off + headerAlign - 1) &^ (headerAlign - 1)
}

// maxVariableSize is the firmware's limit on one authenticated
// variable's record (header, name and data: PcdMaxAuthVariableSize),
// which OvmfPkg's platform descriptions tie to the flash layout: 0x8400
// bytes in the 4 MiB build, whose variable store is 0x40000 bytes with
// the volume header (storeSize, the VARIABLE_STORE_HEADER's Size,
// 0x3ffb8), 0x2800 in the 1 and 2 MiB builds (0xe000, 0xdfb8). The
// firmware cannot update a larger variable (an append to db would fail),
// so Enroll refuses to write one.
func maxVariableSize(storeSize int) int {
	if storeSize >= 0x40000-0x48 {
		return 0x8400
	}
	return 0x2800
}
