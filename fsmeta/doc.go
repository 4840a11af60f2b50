// Package fsmeta is the metadata service's contract with its clients:
// the rules for names, where a file's chunks live (ChunkChain: the same
// integer arithmetic in every language), how long a read lease lasts, and
// the errors the namespace answers with, which keep their identity across
// gRPC (ErrorOf). The meta servers and the SDK both import it; it imports
// neither.
package fsmeta
