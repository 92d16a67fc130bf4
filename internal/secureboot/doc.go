// Package secureboot signs EFI binaries for UEFI Secure Boot with an
// operator's db key, and reads the certificates enrolled into firmware.
//
// The db key is not one of a line's minisign keys: the firmware checks
// the boot loader and each unified kernel image (package uki) against
// the certificates in its db variable before it runs them, and an
// operator enrolls those certificates once per machine (package
// efivars writes them into an OVMF variable store for virtual
// machines). Signing runs sbsign from sbsigntool, and every signature
// is checked with sbverify against the certificate before it is used.
// The key and the certificate reach both programs through pipes, as the
// bytes this package checked, never through a path they would open
// again.
package secureboot
