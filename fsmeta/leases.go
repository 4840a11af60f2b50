package fsmeta

import "time"

// ReadLease is how long a client's word that it has a file open for
// reading keeps the file's chunks from the collector. Clients renew well
// within it (sdk: every ReadLease/3).
const ReadLease = 30 * time.Second

// MaxKeepOpen bounds the files one KeepOpen request may name.
const MaxKeepOpen = 1 << 16
