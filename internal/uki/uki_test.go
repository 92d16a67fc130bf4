package uki

import (
	"bytes"
	"debug/pe"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/manifests"
)

// stubPath is systemd's EFI stub as Debian's systemd-boot-efi ships it.
const stubPath = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"

// fakeStub is a minimal unsigned x86-64 EFI application laid out as
// linkers write one: headers of 0x400 bytes, sections at 0x200 in the
// file and 0x1000 in memory, and a COFF symbol table after the last
// section. mutate may change the headers before the sections are
// written.
type fakeStub struct {
	sections      []string
	sizeOfHeaders uint32
	machine       uint16
	subsystem     uint16
	signed        bool
}

func defaultStub() fakeStub {
	return fakeStub{
		sections:      []string{".text", ".data", ".sbat"},
		sizeOfHeaders: 0x400,
		machine:       pe.IMAGE_FILE_MACHINE_AMD64,
		subsystem:     subsystemEFIApp,
	}
}

// sectionBody is the content of a fake stub's section i.
func sectionBody(i int) []byte {
	return bytes.Repeat([]byte{byte(0xa0 + i)}, 0x180+i*0x100)
}

func (s fakeStub) bytes() []byte {
	le := binary.LittleEndian
	const lfanew = 0x40
	b := make([]byte, s.sizeOfHeaders)
	copy(b, "MZ")
	le.PutUint32(b[0x3c:], lfanew)
	copy(b[lfanew:], "PE\x00\x00")
	coff := lfanew + 4
	opt := coff + coffHeaderSize
	const optSize = 112 + 16*8
	le.PutUint16(b[coff:], s.machine)
	le.PutUint16(b[coff+coffNumSections:], uint16(len(s.sections)))
	le.PutUint32(b[coff+coffTimeStamp:], 0x5f5e100)
	le.PutUint16(b[coff+16:], optSize)
	le.PutUint16(b[coff+18:], 0x0022)
	le.PutUint16(b[opt:], optMagicPE32Plus)
	le.PutUint32(b[opt+32:], 0x1000) // SectionAlignment
	le.PutUint32(b[opt+36:], 0x200)  // FileAlignment
	le.PutUint32(b[opt+optSizeOfHeaders:], s.sizeOfHeaders)
	le.PutUint16(b[opt+68:], s.subsystem)
	le.PutUint32(b[opt+108:], 16) // NumberOfRvaAndSizes
	table := opt + optSize
	va, off := uint32(0x1000), uint32(s.sizeOfHeaders)
	var data []byte
	for i, name := range s.sections {
		body := sectionBody(i)
		raw := uint32(alignUp(int64(len(body)), 0x200))
		h := b[table+i*sectionSize:]
		copy(h, name)
		le.PutUint32(h[8:], uint32(len(body)))
		le.PutUint32(h[12:], va)
		le.PutUint32(h[16:], raw)
		le.PutUint32(h[20:], off)
		le.PutUint32(h[36:], scnData)
		data = append(data, body...)
		data = append(data, make([]byte, int(raw)-len(body))...)
		va += uint32(alignUp(int64(len(body)), 0x1000))
		off += raw
	}
	le.PutUint32(b[opt+optSizeOfImage:], va)
	// A symbol table after the sections: two 18-byte symbols and an
	// empty string table.
	le.PutUint32(b[coff+coffSymbols:], off)
	le.PutUint32(b[coff+coffNumSymbols:], 2)
	out := append(b, data...)
	out = append(out, make([]byte, 36)...)
	out = le.AppendUint32(out, 4)
	if s.signed {
		le.PutUint32(out[opt+112+dirSecurity*8:], uint32(len(out)))
		le.PutUint32(out[opt+112+dirSecurity*8+4:], 8)
		out = append(out, make([]byte, 8)...)
	}
	return out
}

func testParts(cmdline string) Parts {
	initrd := bytes.Repeat([]byte("initrd"), 1000)
	kernel := bytes.Repeat([]byte("kernel!"), 3001)
	return Parts{
		OSRelease:  []byte("ID=strata\nVERSION_ID=1\n"),
		Cmdline:    cmdline,
		Initrd:     bytes.NewReader(initrd),
		InitrdSize: int64(len(initrd)),
		Kernel:     bytes.NewReader(kernel),
		KernelSize: int64(len(kernel)),
	}
}

func build(t *testing.T, stub []byte, p Parts) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := Build(&out, stub, p); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// checkUKI parses a built UKI and checks its layout against the stub and
// the parts: the stub's sections unchanged, then the four new ones, each
// holding exactly its part, on page boundaries in memory, aligned in the
// file, inside SizeOfImage, with no symbol table left.
func checkUKI(t *testing.T, stub, img []byte, p Parts, initrd, kernel []byte) {
	t.Helper()
	sf, err := pe.NewFile(bytes.NewReader(stub))
	if err != nil {
		t.Fatal(err)
	}
	f, err := pe.NewFile(bytes.NewReader(img))
	if err != nil {
		t.Fatalf("the UKI does not parse: %v", err)
	}
	oh := f.OptionalHeader.(*pe.OptionalHeader64)
	if f.NumberOfSymbols != 0 || f.PointerToSymbolTable != 0 || f.TimeDateStamp != 0 || oh.CheckSum != 0 {
		t.Errorf("symbols %d at %#x, time stamp %#x, checksum %#x; want all zero",
			f.NumberOfSymbols, f.PointerToSymbolTable, f.TimeDateStamp, oh.CheckSum)
	}
	n := len(sf.Sections)
	if len(f.Sections) != n+4 {
		t.Fatalf("%d sections, want %d", len(f.Sections), n+4)
	}
	for i, s := range sf.Sections {
		got, want := f.Sections[i], s
		if got.SectionHeader != want.SectionHeader {
			t.Errorf("stub section %s: header %+v, want %+v", want.Name, got.SectionHeader, want.SectionHeader)
		}
		a, _ := got.Data()
		b, _ := want.Data()
		if !bytes.Equal(a, b) {
			t.Errorf("stub section %s: content changed", want.Name)
		}
	}
	want := map[string][]byte{
		SectionOSRel: p.OSRelease, SectionCmdline: []byte(p.Cmdline),
		SectionInitrd: initrd, SectionLinux: kernel,
	}
	prevEnd := uint32(0)
	for _, s := range sf.Sections {
		prevEnd = max(prevEnd, s.VirtualAddress+max(s.VirtualSize, s.Size))
	}
	for i, name := range []string{SectionOSRel, SectionCmdline, SectionInitrd, SectionLinux} {
		s := f.Sections[n+i]
		if s.Name != name {
			t.Fatalf("section %d is %q, want %q", n+i, s.Name, name)
		}
		if s.VirtualAddress%pageSize != 0 || s.VirtualAddress < prevEnd {
			t.Errorf("section %s at %#x: not page aligned after %#x", name, s.VirtualAddress, prevEnd)
		}
		if s.Offset%oh.FileAlignment != 0 || s.Size%oh.FileAlignment != 0 {
			t.Errorf("section %s: raw data at %#x, %#x bytes, not aligned to %#x", name, s.Offset, s.Size, oh.FileAlignment)
		}
		if int(s.VirtualSize) != len(want[name]) {
			t.Errorf("section %s: virtual size %d, want %d", name, s.VirtualSize, len(want[name]))
		}
		data := make([]byte, s.VirtualSize)
		if _, err := s.ReadAt(data, 0); err != nil || !bytes.Equal(data, want[name]) {
			t.Errorf("section %s: content differs (%v)", name, err)
		}
		if s.Characteristics != scnData {
			t.Errorf("section %s: characteristics %#x, want %#x", name, s.Characteristics, scnData)
		}
		prevEnd = s.VirtualAddress + s.VirtualSize
	}
	if oh.SizeOfImage < prevEnd || oh.SizeOfImage%oh.SectionAlignment != 0 {
		t.Errorf("SizeOfImage %#x: not aligned or short of %#x", oh.SizeOfImage, prevEnd)
	}
	last := f.Sections[len(f.Sections)-1]
	if int(last.Offset+last.Size) != len(img) {
		t.Errorf("the UKI is %d bytes; its last section ends at %d", len(img), last.Offset+last.Size)
	}
}

func TestBuild(t *testing.T) {
	stub := defaultStub().bytes()
	p := testParts("root=PARTUUID=1234 ro strata.roothash=abcd")
	initrd, _ := io.ReadAll(p.Initrd)
	kernel, _ := io.ReadAll(p.Kernel)
	p.Initrd, p.Kernel = bytes.NewReader(initrd), bytes.NewReader(kernel)
	img := build(t, stub, p)
	checkUKI(t, stub, img, p, initrd, kernel)

	info, err := ReadInfo(bytes.NewReader(img), int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	if info.Cmdline != p.Cmdline || info.OSRelease != string(p.OSRelease) || info.Signed {
		t.Errorf("ReadInfo = %+v", info)
	}

	// The same inputs give the same bytes.
	if again := build(t, stub, testParts(p.Cmdline)); !bytes.Equal(again, img) {
		t.Error("two builds of the same inputs differ")
	}
	if other := build(t, stub, testParts(p.Cmdline+" quiet")); bytes.Equal(other, img) {
		t.Error("a different command line gave the same UKI")
	}
}

func TestBuildRefuses(t *testing.T) {
	long := strings.Repeat("x", MaxCmdline+1)
	cases := []struct {
		name string
		stub func(*fakeStub)
		part func(*Parts)
		want error
		msg  string
	}{
		{name: "signed stub", stub: func(s *fakeStub) { s.signed = true }, want: ErrNotStub, msg: "signed"},
		{name: "i386 stub", stub: func(s *fakeStub) { s.machine = pe.IMAGE_FILE_MACHINE_I386 }, want: ErrNotStub, msg: "x86-64"},
		{name: "console application", stub: func(s *fakeStub) { s.subsystem = 3 }, want: ErrNotStub, msg: "EFI application"},
		{name: "no header room", stub: func(s *fakeStub) {
			s.sections = []string{".a", ".b", ".c", ".d"}
			s.sizeOfHeaders = 0x200
		}, want: ErrNotStub, msg: "no room"},
		{name: "stub with a .linux", stub: func(s *fakeStub) { s.sections = append(s.sections, ".linux") }, want: ErrNotStub, msg: ".linux"},
		{name: "long command line", part: func(p *Parts) { p.Cmdline = long }, msg: "command line"},
		{name: "NUL in the command line", part: func(p *Parts) { p.Cmdline = "a\x00b" }, msg: "NUL"},
		{name: "NUL in os-release", part: func(p *Parts) { p.OSRelease = []byte("ID=a\x00") }, msg: "NUL"},
		{name: "no kernel", part: func(p *Parts) { p.Kernel = nil }, msg: "no kernel"},
		{name: "empty command line", part: func(p *Parts) { p.Cmdline = "" }, msg: "empty command line"},
		{name: "empty os-release", part: func(p *Parts) { p.OSRelease = nil }, msg: "empty"},
		{name: "empty initrd", part: func(p *Parts) { p.Initrd, p.InitrdSize = bytes.NewReader(nil), 0 }, msg: "no initrd"},
		{name: "stub with a .linux2", stub: func(s *fakeStub) { s.sections = append(s.sections, ".linux2") }, want: ErrNotStub, msg: ".linux2"},
		{name: "short kernel", part: func(p *Parts) { p.KernelSize += 10 }, msg: "not the"},
		{name: "long initrd", part: func(p *Parts) { p.InitrdSize -= 10 }, msg: "not the"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := defaultStub()
			if c.stub != nil {
				c.stub(&s)
			}
			p := testParts("root=x")
			if c.part != nil {
				c.part(&p)
			}
			err := Build(io.Discard, s.bytes(), p)
			if err == nil {
				t.Fatal("Build accepted it")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("error %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not say %q", err, c.msg)
			}
		})
	}
	if err := Build(io.Discard, []byte("MZ not a PE"), testParts("x")); !errors.Is(err, ErrNotStub) {
		t.Errorf("garbage stub: %v", err)
	}
}

func TestReadInfoRefuses(t *testing.T) {
	stub := defaultStub()
	plain := stub.bytes()
	if _, err := ReadInfo(bytes.NewReader(plain), int64(len(plain))); !errors.Is(err, ErrNotUKI) {
		t.Errorf("a stub without sections: %v", err)
	}
	if _, err := ReadInfo(strings.NewReader("not a PE"), 8); !errors.Is(err, ErrNotUKI) {
		t.Errorf("garbage: %v", err)
	}
	// A section larger than ReadInfo reads is refused before it is read.
	big := defaultStub()
	big.sections = []string{".cmdline", ".osrel", ".linux"}
	img := big.bytes()
	le := binary.LittleEndian
	table := 0x40 + 4 + coffHeaderSize + 112 + 16*8
	le.PutUint32(img[table+8:], maxTextSection+1)  // VirtualSize of .cmdline
	le.PutUint32(img[table+16:], maxTextSection+1) // SizeOfRawData
	if _, err := ReadInfo(bytes.NewReader(img), int64(len(img))); !errors.Is(err, ErrNotUKI) || !strings.Contains(err.Error(), ".cmdline") {
		t.Errorf("huge .cmdline: %v", err)
	}
	// Two sections of one name: which one a loader takes is its choice.
	two := defaultStub()
	two.sections = []string{".cmdline", ".osrel", ".cmdline", ".linux"}
	img = two.bytes()
	if _, err := ReadInfo(bytes.NewReader(img), int64(len(img))); !errors.Is(err, ErrNotUKI) || !strings.Contains(err.Error(), "two .cmdline") {
		t.Errorf("two .cmdline sections: %v", err)
	}
	// Build refuses an os-release that ReadInfo would not read.
	p := testParts("x")
	p.OSRelease = bytes.Repeat([]byte("y"), maxTextSection+1)
	if err := Build(io.Discard, plain, p); err == nil || !strings.Contains(err.Error(), "os-release") {
		t.Errorf("huge os-release: %v", err)
	}
}

// TestBuildSystemdStub builds on systemd's own stub: its eight sections
// stay as they were and the four new ones follow.
func TestBuildSystemdStub(t *testing.T) {
	testenv.RequireTools(t, []string{stubPath})
	stub, err := os.ReadFile(stubPath)
	if err != nil {
		t.Fatal(err)
	}
	p := testParts("console=ttyS0 root=/dev/mapper/root ro")
	initrd, _ := io.ReadAll(p.Initrd)
	kernel, _ := io.ReadAll(p.Kernel)
	p.Initrd, p.Kernel = bytes.NewReader(initrd), bytes.NewReader(kernel)
	img := build(t, stub, p)
	checkUKI(t, stub, img, p, initrd, kernel)
	info, err := ReadInfo(bytes.NewReader(img), int64(len(img)))
	if err != nil || info.Cmdline != p.Cmdline {
		t.Fatalf("ReadInfo = %+v, %v", info, err)
	}
}

// A boot image path that names no file is the operator's to fix (an I/O
// error, exit 1), not a bad boot image; one that names a FIFO or a
// directory is refused as not a boot image, without blocking on it.
func TestCheckBootImageOpenErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := CheckBootImage(dir+"/missing.efi", strings.Repeat("0", 64))
	if !errors.Is(err, os.ErrNotExist) || errors.Is(err, manifests.ErrBootImage) {
		t.Errorf("missing file: %v, want a not-exist error that is no rejection", err)
	}
	fifo := dir + "/fifo.efi"
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, dir} {
		if _, err := CheckBootImage(p, strings.Repeat("0", 64)); !errors.Is(err, manifests.ErrBootImage) {
			t.Errorf("%s: %v, want ErrBootImage", p, err)
		}
	}
}
