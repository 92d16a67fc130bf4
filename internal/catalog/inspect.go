package catalog

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"strings"
)

// fileKind tells programs apart by their first bytes.
type fileKind int

const (
	kindOther  fileKind = iota
	kindELF             // an ELF object
	kindScript          // starts with "#!"
)

// fileInfo is what the catalog learns from reading one program or library.
type fileInfo struct {
	kind    fileKind
	shebang []string // words of the "#!" line, for scripts
	elf     *elfInfo // for ELF objects
}

// elfInfo is the dynamic-linking view of an ELF object.
type elfInfo struct {
	class   elf.Class
	machine elf.Machine
	needed  []string // DT_NEEDED
	runpath []string // DT_RUNPATH entries
	rpath   []string // DT_RPATH entries
	interp  string   // PT_INTERP
}

// shebangMax is how much of a script's first line the kernel reads.
const shebangMax = 256

// inspectFile reads the regular, symlink-free file p of fsys. A file that
// starts with the ELF magic but does not parse counts as kindOther.
func inspectFile(fsys fs.FS, p string) (*fileInfo, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", p, err)
	}
	defer f.Close()
	head := make([]byte, shebangMax)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte("#!")):
		line, _, _ := bytes.Cut(head[2:], []byte("\n"))
		return &fileInfo{kind: kindScript, shebang: strings.Fields(string(line))}, nil
	case !bytes.HasPrefix(head, []byte(elf.ELFMAG)):
		return &fileInfo{kind: kindOther}, nil
	}
	r, ok := f.(io.ReaderAt)
	if !ok {
		rest, err := io.ReadAll(f)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		r = bytes.NewReader(append(head, rest...))
	}
	// An object that does not parse is not a program the loader could
	// run either: treat it as data rather than fail the whole catalog.
	if info, err := readELF(r); err == nil {
		return &fileInfo{kind: kindELF, elf: info}, nil
	}
	return &fileInfo{kind: kindOther}, nil
}

// readELF extracts the dynamic-linking data of an ELF object.
func readELF(r io.ReaderAt) (*elfInfo, error) {
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	defer ef.Close()
	info := &elfInfo{class: ef.Class, machine: ef.Machine}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
		if err != nil {
			return nil, err
		}
		info.interp = strings.TrimRight(string(b), "\x00")
	}
	if info.needed, err = ef.ImportedLibraries(); err != nil {
		return nil, err
	}
	runpath, err := ef.DynString(elf.DT_RUNPATH)
	if err != nil {
		return nil, err
	}
	rpath, err := ef.DynString(elf.DT_RPATH)
	if err != nil {
		return nil, err
	}
	info.runpath = splitSearchPath(runpath)
	info.rpath = splitSearchPath(rpath)
	return info, nil
}

// splitSearchPath splits DT_RUNPATH or DT_RPATH strings into directories.
func splitSearchPath(vals []string) []string {
	var out []string
	for _, v := range vals {
		for d := range strings.SplitSeq(v, ":") {
			if d != "" {
				out = append(out, d)
			}
		}
	}
	return out
}
