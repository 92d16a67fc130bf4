// Package efivars enrolls Secure Boot keys into an OVMF firmware variable
// store offline: given a copy of the raw flash file qemu takes as the
// second pflash drive (OVMF_VARS_4M.fd), Enroll writes the platform key
// (PK), the key exchange keys (KEK) and the signature database (db) as
// authenticated variables, so that OVMF's Secure Boot build
// (OVMF_CODE_4M.secboot.fd) starts in user mode with Secure Boot on and
// trusts exactly the certificates given. It does, in pure Go, what
// virt-firmware's `virt-fw-vars --set-pk ... --add-kek ... --add-db ...
// --secure-boot` does (not --enroll-cert, which adds Microsoft's KEKs).
//
// The store is an EFI firmware volume (EFI_SYSTEM_NV_DATA_FV_GUID) whose
// first region is an authenticated variable store: a
// VARIABLE_STORE_HEADER, then AUTHENTICATED_VARIABLE_HEADER records, each
// followed by its UTF-16 name and its data and aligned to 4 bytes, then
// erased flash (0xFF). Enroll appends records to the free space exactly
// as the firmware's variable driver would; it changes nothing else (the
// firmware volume header and its checksum, the fault-tolerant-write
// working block and spare area after the variable store are copied
// unchanged), and the same inputs give the same bytes.
//
// List reads the records of a store. The store is treated as hostile:
// every size read from it is bounded by the store, and a malformed store
// is an error, never a panic.
//
// On a running machine, ReadFirmware reads the Secure Boot state its
// firmware shows through efivarfs (SecureBoot, db, dbx; ParseDatabase
// reads the signature lists), and Firmware.Check tells whether db and
// dbx would let a signer's kernel image boot, so that a node refuses a
// boot image its firmware would refuse before it installs it. The
// variables are read as hostile too: bounded, never from a FIFO or a
// device, and a list that does not add up is an error.
package efivars
