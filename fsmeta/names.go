package fsmeta

import (
	"fmt"
	"strings"
)

// Limits on names and paths.
const (
	MaxName = 255 // bytes in one name
)

// MaxFileSize is the largest length a file may have, 16 TiB (ext4's
// limit): a truncate or a write past it is refused with ErrFileTooLarge
// (EFBIG). Chunk indexes are 32 bits, so it also needs chunks of 4 KiB or
// more; every layout's are.
const MaxFileSize = 1 << 44

// MaxEnded bounds the other write sessions one close may end beside its
// own (CloseRequest.ended).
const MaxEnded = 1024

// CheckSize refuses a file length past MaxFileSize.
func CheckSize(size uint64) error {
	if size > MaxFileSize {
		return fmt.Errorf("%w: length %d, limit %d", ErrFileTooLarge, size, uint64(MaxFileSize))
	}
	return nil
}

// CheckName refuses names no directory may hold.
func CheckName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("%w: %q holds '/' or NUL", ErrInvalidName, name)
	case len(name) > MaxName:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrNameTooLong, len(name), MaxName)
	}
	return nil
}
