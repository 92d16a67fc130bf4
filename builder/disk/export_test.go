package disk

// CheckFirmwareTrusts is checkFirmwareTrusts, for the tests of what a
// node's firmware variables say of a boot image.
var CheckFirmwareTrusts = checkFirmwareTrusts
