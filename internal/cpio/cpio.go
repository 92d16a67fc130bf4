package cpio

import (
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// ErrName reports a name the kernel would not unpack where it is meant.
var ErrName = errors.New("bad cpio member name")

// Writer writes a newc archive. Members go in the order written; a
// directory must come before what is in it.
type Writer struct {
	w    io.Writer
	ino  uint32
	err  error
	done bool
}

// NewWriter starts an archive on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w, ino: 1} }

// Dir adds a directory (name relative, no leading slash) with mode's
// permission bits, owned by root.
func (cw *Writer) Dir(name string, mode uint32) error {
	return cw.member(name, 0o040000|mode&0o7777, nil)
}

// File adds a regular file with mode's permission bits, owned by root.
func (cw *Writer) File(name string, mode uint32, data []byte) error {
	return cw.member(name, 0o100000|mode&0o7777, data)
}

// Close writes the trailer. It does not close the underlying writer.
func (cw *Writer) Close() error {
	if cw.err == nil && !cw.done {
		cw.err = cw.header("TRAILER!!!", 0, 0, 0, 0)
		cw.done = true
	}
	return cw.err
}

func (cw *Writer) member(name string, mode uint32, data []byte) error {
	if cw.err != nil {
		return cw.err
	}
	if name == "" || strings.HasPrefix(name, "/") || path.Clean(name) != name || name == "." || strings.HasPrefix(name, "../") || name == ".." || strings.ContainsRune(name, 0) {
		return fmt.Errorf("%w: %q", ErrName, name)
	}
	if int64(len(data)) > 0xffffffff {
		cw.err = fmt.Errorf("cpio member %s: %d bytes (newc holds at most 4 GiB - 1)", name, len(data))
		return cw.err
	}
	ino := cw.ino
	cw.ino++
	nlink := uint32(1)
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	if cw.err = cw.header(name, ino, mode, nlink, uint32(len(data))); cw.err != nil {
		return cw.err
	}
	if _, cw.err = cw.w.Write(data); cw.err != nil {
		return cw.err
	}
	cw.err = cw.pad(len(data))
	return cw.err
}

// header writes one 110-byte newc header, the name with its NUL, and the
// padding to a multiple of four. Times are 0 (reproducible), devices
// 0:0, the check field 0.
func (cw *Writer) header(name string, ino, mode, nlink, size uint32) error {
	h := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	if _, err := io.WriteString(cw.w, h+name+"\x00"); err != nil {
		return err
	}
	return cw.pad(len(h) + len(name) + 1)
}

func (cw *Writer) pad(n int) error {
	if r := n % 4; r != 0 {
		_, err := cw.w.Write(make([]byte, 4-r))
		return err
	}
	return nil
}
