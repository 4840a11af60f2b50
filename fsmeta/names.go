package fsmeta

import (
	"fmt"
	"strings"
)

// Limits on names and paths.
const (
	MaxName = 255 // bytes in one name
)

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
