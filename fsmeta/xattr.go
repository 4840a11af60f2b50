package fsmeta

import (
	"fmt"
	"strings"
)

// Limits on extended attributes, Linux's (XATTR_NAME_MAX, XATTR_SIZE_MAX,
// XATTR_LIST_MAX).
const (
	MaxXattrName  = 255      // bytes in a name, its namespace prefix included
	MaxXattrValue = 64 << 10 // bytes in a value
	MaxXattrList  = 64 << 10 // bytes in an inode's names, each with its NUL
	XattrCreate   = 1        // setxattr's XATTR_CREATE: fail if it exists
	XattrReplace  = 2        // setxattr's XATTR_REPLACE: fail if it does not
)

// xattrNamespaces are the namespaces Sluice keeps attributes in. system.*
// (POSIX ACLs, which the kernel would have to enforce) is not among them.
var xattrNamespaces = []string{"user.", "trusted.", "security."}

// CheckXattrName refuses a name setxattr(2) would refuse: empty or longer
// than MaxXattrName (ErrXattrRange), or outside the namespaces Sluice keeps
// (ErrNotSupported). Who may use trusted.* and security.* is the caller's
// business (the kernel checks trusted.*, the FUSE mount security.*).
func CheckXattrName(name string) error {
	if name == "" || len(name) > MaxXattrName {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrXattrRange, len(name), MaxXattrName)
	}
	for _, ns := range xattrNamespaces {
		if strings.HasPrefix(name, ns) && len(name) > len(ns) {
			return nil
		}
	}
	return fmt.Errorf("%w: extended attribute %q is outside the user, trusted and security namespaces", ErrNotSupported, name)
}

// CheckXattr refuses what CheckXattrName refuses, and a value longer than
// MaxXattrValue (ErrXattrTooBig), and flags other than XattrCreate or
// XattrReplace.
func CheckXattr(name string, value []byte, flags uint32) error {
	if err := CheckXattrName(name); err != nil {
		return err
	}
	if len(value) > MaxXattrValue {
		return fmt.Errorf("%w: value of %d bytes, limit %d", ErrXattrTooBig, len(value), MaxXattrValue)
	}
	if flags&^(XattrCreate|XattrReplace) != 0 || flags == XattrCreate|XattrReplace {
		return fmt.Errorf("%w: setxattr flags %#x", ErrInvalidName, flags)
	}
	return nil
}
