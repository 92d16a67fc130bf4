package uki

import (
	"debug/pe"
	"fmt"
	"io"
	"strings"
)

// Info is what ReadInfo reads of a UKI.
type Info struct {
	// Cmdline is the .cmdline section; OSRelease the .osrel one.
	Cmdline   string
	OSRelease string
	// Signed reports a certificate table (an Authenticode signature,
	// not checked here).
	Signed bool
}

// maxTextSection bounds the text sections ReadInfo reads.
const maxTextSection = 64 << 10

// ReadInfo reads a UKI's command line and os-release from r, a file of
// size bytes. A file that is not a PE image with both sections is
// refused.
func ReadInfo(r io.ReaderAt, size int64) (*Info, error) {
	f, err := pe.NewFile(io.NewSectionReader(r, 0, size))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotUKI, err)
	}
	defer f.Close()
	info := &Info{}
	if oh, ok := f.OptionalHeader.(*pe.OptionalHeader64); ok && len(oh.DataDirectory) > dirSecurity {
		info.Signed = oh.DataDirectory[dirSecurity].Size != 0
	}
	for _, want := range []struct {
		name, trim string
		to         *string
	}{{SectionCmdline, "\x00\n", &info.Cmdline}, {SectionOSRel, "\x00", &info.OSRelease}} {
		var s *pe.Section
		for _, c := range f.Sections {
			if c.Name != want.name {
				continue
			}
			if s != nil {
				// Which one a loader takes is its choice: refuse.
				return nil, fmt.Errorf("%w: two %s sections", ErrNotUKI, want.name)
			}
			s = c
		}
		if s == nil {
			return nil, fmt.Errorf("%w: no %s section", ErrNotUKI, want.name)
		}
		n := min(s.VirtualSize, s.Size)
		if n > maxTextSection {
			return nil, fmt.Errorf("%w: section %s is %d bytes (at most %d)", ErrNotUKI, want.name, n, maxTextSection)
		}
		b := make([]byte, n)
		if _, err := s.ReadAt(b, 0); err != nil {
			return nil, fmt.Errorf("%w: section %s: %v", ErrNotUKI, want.name, err)
		}
		*want.to = strings.TrimRight(string(b), want.trim)
	}
	if f.Section(SectionLinux) == nil {
		return nil, fmt.Errorf("%w: no %s section", ErrNotUKI, SectionLinux)
	}
	return info, nil
}
