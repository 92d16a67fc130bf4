package efivars

import (
	"encoding/hex"
	"fmt"
)

// GUID is an EFI GUID in the byte order it has on flash: the first three
// fields (4, 2 and 2 bytes) little-endian, the last 8 bytes as written.
// ParseGUID and String convert from and to the usual text form.
type GUID [16]byte

// ParseGUID parses the text form of a GUID,
// "8be4df61-93ca-11d2-aa0d-00e098032b8c", into flash byte order.
func ParseGUID(s string) (GUID, error) {
	var g GUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return g, fmt.Errorf("ovmf vars: GUID %q: not of the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", s)
	}
	var b [16]byte
	hexs := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(b[:], []byte(hexs)); err != nil {
		return g, fmt.Errorf("ovmf vars: GUID %q: %v", s, err)
	}
	// Data1 (4 bytes), Data2 and Data3 (2 bytes each) are little-endian
	// on flash; Data4 (8 bytes) is a byte array.
	g[0], g[1], g[2], g[3] = b[3], b[2], b[1], b[0]
	g[4], g[5] = b[5], b[4]
	g[6], g[7] = b[7], b[6]
	copy(g[8:], b[8:])
	return g, nil
}

// String returns the GUID's text form, lower case, as ParseGUID takes it.
func (g GUID) String() string {
	b := []byte{g[3], g[2], g[1], g[0], g[5], g[4], g[7], g[6]}
	b = append(b, g[8:]...)
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// mustGUID is ParseGUID for the constants below; it panics on a typo,
// which the tests catch.
func mustGUID(s string) GUID {
	g, err := ParseGUID(s)
	if err != nil {
		panic(err)
	}
	return g
}

var (
	// guidNVDataFV is EFI_SYSTEM_NV_DATA_FV_GUID, the file system GUID
	// of the firmware volume that holds the variable store.
	guidNVDataFV = mustGUID("fff12b8d-7696-4c8b-a985-2747075b4f50")
	// guidAuthVarStore is gEfiAuthenticatedVariableGuid, the signature
	// of a variable store whose records have the authenticated header.
	guidAuthVarStore = mustGUID("aaf32c78-947b-439a-a180-2e144ec37792")
	// guidVarStore is gEfiVariableGuid, the signature of a store of
	// plain (non-authenticated) variables, which cannot hold keys.
	guidVarStore = mustGUID("ddcf3616-3275-4164-98b6-fe85707ffe7d")

	// guidGlobal is EFI_GLOBAL_VARIABLE, the vendor of PK and KEK.
	guidGlobal = mustGUID("8be4df61-93ca-11d2-aa0d-00e098032b8c")
	// guidImageSecurityDB is EFI_IMAGE_SECURITY_DATABASE_GUID, the
	// vendor of db and dbx.
	guidImageSecurityDB = mustGUID("d719b2cb-3d3a-4596-a3bc-dad00e67656f")
	// guidSecureBootEnable is gEfiSecureBootEnableDisableGuid, edk2's
	// vendor of SecureBootEnable.
	guidSecureBootEnable = mustGUID("f0a30bc7-af08-4556-99c4-001009c93a44")
	// guidCustomMode is gEfiCustomModeEnableGuid, edk2's vendor of
	// CustomMode.
	guidCustomMode = mustGUID("c076ec0c-7028-4399-a072-71ee5c448b9f")

	// guidCertX509 is EFI_CERT_X509_GUID, the signature type of a list
	// of DER certificates.
	guidCertX509 = mustGUID("a5c059a1-94e4-4aa7-87b5-ab155c2bf072")
	// guidCertSHA256 is EFI_CERT_SHA256_GUID, the signature type of a
	// list of SHA-256 image digests.
	guidCertSHA256 = mustGUID("c1c41626-504c-4092-aca9-41f936934328")
)
