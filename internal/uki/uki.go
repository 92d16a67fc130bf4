package uki

import (
	"bytes"
	"debug/pe"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// ErrNotStub reports a stub that is not an unsigned x86-64 EFI
// application with room for the sections a UKI adds.
var ErrNotStub = errors.New("not a usable EFI stub")

// ErrNotUKI reports a file that is not a unified kernel image.
var ErrNotUKI = errors.New("not a unified kernel image")

// Section names of a UKI (systemd's stub looks them up by name).
const (
	SectionOSRel   = ".osrel"
	SectionCmdline = ".cmdline"
	SectionInitrd  = ".initrd"
	SectionLinux   = ".linux"
)

// MaxStubSize bounds the stub Build takes (systemd's is under 100 KiB).
const MaxStubSize = 1 << 20

// HeadSize is how much of a UKI Build wrote ReadInfo needs: the stub
// and the .osrel and .cmdline sections, which come before the initrd and
// the kernel.
const HeadSize = MaxStubSize + 2*maxTextSection + 4*pageSize

// MaxCmdline is the longest command line the x86 kernel takes
// (COMMAND_LINE_SIZE, less its NUL).
const MaxCmdline = 2047

// Parts are what a UKI carries besides the stub.
type Parts struct {
	// OSRelease is the .osrel section, an os-release file: systemd-boot
	// lists a UKI only if it names an ID and a version, and orders UKIs
	// by them.
	OSRelease []byte
	// Cmdline is the kernel command line (.cmdline).
	Cmdline string
	// Initrd is the initrd (.initrd): the archives the kernel unpacks, in
	// order, concatenated. InitrdSize is its length.
	Initrd     io.Reader
	InitrdSize int64
	// Kernel is the kernel image (.linux), KernelSize its length.
	Kernel     io.Reader
	KernelSize int64
}

// PE layout constants (Microsoft PE/COFF specification).
const (
	coffHeaderSize   = 20
	sectionSize      = 40
	optMagicPE32Plus = 0x20b
	subsystemEFIApp  = 10
	dirSecurity      = 4
	// Offsets in the PE32+ optional header.
	optSizeOfInitData = 8
	optSizeOfImage    = 56
	optSizeOfHeaders  = 60
	optCheckSum       = 64
	// Offsets in the COFF header.
	coffNumSections = 2
	coffTimeStamp   = 4
	coffSymbols     = 8
	coffNumSymbols  = 12
	// Section characteristics: initialised, readable data.
	scnData = pe.IMAGE_SCN_CNT_INITIALIZED_DATA | pe.IMAGE_SCN_MEM_READ
	// New sections start on page boundaries in memory.
	pageSize = 4096
)

type added struct {
	name string
	r    io.Reader
	size int64
}

// Build writes to w the UKI of stub (systemd's linuxx64.efi.stub) and p:
// the stub's own sections, then .osrel, .cmdline, .initrd and .linux,
// each on a page boundary in memory after the last of the stub's. It
// checks everything before it writes: a stub that is not an unsigned
// x86-64 EFI application, or that has no room in its headers for four
// more section headers, and a command line the kernel would cut, are
// refused.
func Build(w io.Writer, stub []byte, p Parts) error {
	if len(p.Cmdline) > MaxCmdline {
		return fmt.Errorf("uki: the command line is %d bytes; the kernel takes %d", len(p.Cmdline), MaxCmdline)
	}
	// An empty .cmdline would make systemd's stub take the boot
	// loader's command line, which nothing signs.
	if p.Cmdline == "" || len(p.OSRelease) == 0 {
		return fmt.Errorf("uki: an empty command line or os-release")
	}
	if len(p.OSRelease) > maxTextSection {
		return fmt.Errorf("uki: the os-release is %d bytes (at most %d)", len(p.OSRelease), maxTextSection)
	}
	if bytes.IndexByte([]byte(p.Cmdline), 0) >= 0 || bytes.IndexByte(p.OSRelease, 0) >= 0 {
		return fmt.Errorf("uki: a NUL in the command line or os-release")
	}
	if p.Kernel == nil || p.KernelSize <= 0 || p.Initrd == nil || p.InitrdSize <= 0 {
		return fmt.Errorf("uki: no kernel, or no initrd")
	}
	l, err := parseStub(stub)
	if err != nil {
		return err
	}
	adds := []added{
		{SectionOSRel, bytes.NewReader(p.OSRelease), int64(len(p.OSRelease))},
		{SectionCmdline, bytes.NewReader([]byte(p.Cmdline)), int64(len(p.Cmdline))},
		{SectionInitrd, p.Initrd, p.InitrdSize},
		{SectionLinux, p.Kernel, p.KernelSize},
	}
	for _, s := range l.sections {
		for _, a := range adds {
			if strings.HasPrefix(s.Name, a.name) {
				return fmt.Errorf("uki: the stub already has a %s section: %w", s.Name, ErrNotStub)
			}
		}
	}
	hdrEnd := l.sectionTable + (len(l.sections)+len(adds))*sectionSize
	if hdrEnd > int(l.sizeOfHeaders) || hdrEnd > l.firstData {
		return fmt.Errorf("uki: the stub's headers (%d bytes) have no room for %d more sections: %w", min(int(l.sizeOfHeaders), l.firstData), len(adds), ErrNotStub)
	}
	// The stub's bytes up to the end of its last section's data (its
	// symbol table, after that, is dropped).
	head := slices.Clone(stub[:l.dataEnd])
	off := alignUp(int64(l.dataEnd), int64(l.fileAlign))
	secAlign := max(int64(pageSize), int64(l.sectAlign))
	va := alignUp(int64(l.imageEnd), secAlign)
	initData := int64(binary.LittleEndian.Uint32(head[l.opt+optSizeOfInitData:]))
	table := head[l.sectionTable+len(l.sections)*sectionSize:]
	for i, a := range adds {
		raw := alignUp(a.size, int64(l.fileAlign))
		if a.size > 1<<31 || va+a.size > 1<<31 {
			return fmt.Errorf("uki: section %s (%d bytes) too large for a PE image", a.name, a.size)
		}
		h := table[i*sectionSize : (i+1)*sectionSize]
		clear(h)
		copy(h, a.name)
		le := binary.LittleEndian
		le.PutUint32(h[8:], uint32(a.size)) // VirtualSize
		le.PutUint32(h[12:], uint32(va))    // VirtualAddress
		le.PutUint32(h[16:], uint32(raw))   // SizeOfRawData
		le.PutUint32(h[20:], uint32(off))   // PointerToRawData
		le.PutUint32(h[36:], scnData)
		initData += raw
		off += raw
		va = alignUp(va+a.size, secAlign)
	}
	le := binary.LittleEndian
	le.PutUint16(head[l.coff+coffNumSections:], uint16(len(l.sections)+len(adds)))
	le.PutUint32(head[l.coff+coffTimeStamp:], 0)
	le.PutUint32(head[l.coff+coffSymbols:], 0)
	le.PutUint32(head[l.coff+coffNumSymbols:], 0)
	le.PutUint32(head[l.opt+optSizeOfInitData:], uint32(min(initData, 1<<32-1)))
	le.PutUint32(head[l.opt+optSizeOfImage:], uint32(alignUp(va, int64(l.sectAlign))))
	le.PutUint32(head[l.opt+optCheckSum:], 0)

	written := int64(len(head))
	if _, err := w.Write(head); err != nil {
		return fmt.Errorf("uki: writing: %w", err)
	}
	pad := func(to int64) error {
		if to > written {
			if _, err := w.Write(make([]byte, to-written)); err != nil {
				return fmt.Errorf("uki: writing: %w", err)
			}
			written = to
		}
		return nil
	}
	for _, a := range adds {
		if err := pad(alignUp(written, int64(l.fileAlign))); err != nil {
			return err
		}
		n, err := io.Copy(w, io.LimitReader(a.r, a.size+1))
		if err != nil {
			return fmt.Errorf("uki: writing section %s: %w", a.name, err)
		}
		if n != a.size {
			return fmt.Errorf("uki: section %s: %d bytes, not the %d given", a.name, n, a.size)
		}
		written += n
	}
	return pad(alignUp(written, int64(l.fileAlign)))
}

// stubLayout is where things are in a stub.
type stubLayout struct {
	coff, opt, sectionTable int
	sections                []*pe.Section
	sizeOfHeaders           uint32
	fileAlign, sectAlign    uint32
	dataEnd                 int   // end of the last section's raw data
	firstData               int   // start of the first section's raw data
	imageEnd                int64 // end of the last section in memory
}

func parseStub(stub []byte) (*stubLayout, error) {
	if len(stub) > MaxStubSize {
		return nil, fmt.Errorf("uki: the stub is %d bytes (at most %d): %w", len(stub), MaxStubSize, ErrNotStub)
	}
	f, err := pe.NewFile(bytes.NewReader(stub))
	if err != nil {
		return nil, fmt.Errorf("uki: the stub: %v: %w", err, ErrNotStub)
	}
	defer f.Close()
	oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
	if !ok || f.Machine != pe.IMAGE_FILE_MACHINE_AMD64 || oh.Magic != optMagicPE32Plus {
		return nil, fmt.Errorf("uki: the stub is not an x86-64 PE32+ image: %w", ErrNotStub)
	}
	if oh.Subsystem != subsystemEFIApp {
		return nil, fmt.Errorf("uki: the stub is not an EFI application (subsystem %d): %w", oh.Subsystem, ErrNotStub)
	}
	if len(oh.DataDirectory) > dirSecurity && oh.DataDirectory[dirSecurity].Size != 0 {
		return nil, fmt.Errorf("uki: the stub is signed; give the unsigned stub (its signature would not cover the UKI): %w", ErrNotStub)
	}
	if oh.FileAlignment == 0 || oh.FileAlignment&(oh.FileAlignment-1) != 0 || oh.SectionAlignment < oh.FileAlignment ||
		oh.SectionAlignment&(oh.SectionAlignment-1) != 0 || oh.SectionAlignment > 1<<20 {
		return nil, fmt.Errorf("uki: the stub's alignments (file %#x, section %#x) are invalid: %w", oh.FileAlignment, oh.SectionAlignment, ErrNotStub)
	}
	lfanew := int(binary.LittleEndian.Uint32(stub[0x3c:]))
	l := &stubLayout{
		coff: lfanew + 4, opt: lfanew + 4 + coffHeaderSize, sections: f.Sections,
		sizeOfHeaders: oh.SizeOfHeaders, fileAlign: oh.FileAlignment, sectAlign: oh.SectionAlignment,
	}
	l.sectionTable = l.opt + int(f.SizeOfOptionalHeader)
	if int(oh.SizeOfHeaders) > len(stub) || l.sectionTable+len(f.Sections)*sectionSize > int(oh.SizeOfHeaders) {
		return nil, fmt.Errorf("uki: the stub's section table runs past its headers: %w", ErrNotStub)
	}
	l.dataEnd = int(oh.SizeOfHeaders)
	l.firstData = len(stub)
	for _, s := range f.Sections {
		if s.Size > 0 {
			l.firstData = min(l.firstData, int(s.Offset))
			end := int64(s.Offset) + int64(s.Size)
			if end > int64(len(stub)) {
				return nil, fmt.Errorf("uki: the stub's section %s runs past its end: %w", s.Name, ErrNotStub)
			}
			l.dataEnd = max(l.dataEnd, int(end))
		}
		l.imageEnd = max(l.imageEnd, int64(s.VirtualAddress)+int64(max(s.VirtualSize, s.Size)))
	}
	return l, nil
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }
