// Package uki assembles and reads unified kernel images: systemd's EFI
// stub (linuxx64.efi.stub) with the kernel, the initrd, the kernel
// command line and an os-release appended as PE sections (.linux,
// .initrd, .cmdline, .osrel), as systemd's ukify and the Boot Loader
// Specification's type #2 entries describe them.
//
// One signature over the whole file (package secureboot) then covers the
// kernel, the initrd and the command line together: under Secure Boot the
// firmware refuses a UKI with any byte changed, and the stub ignores a
// command line the boot loader passes. That is what carries a signed root
// hash from the firmware to the kernel.
//
// Build writes the stub's headers and sections unchanged except for the
// section count, the image size and the initialised data size, drops the
// stub's COFF symbol table (nothing loads it), and zeroes the checksum
// and time stamp: the same inputs give the same bytes.
package uki
