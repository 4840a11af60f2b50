// Package sdk is the Go client of a Sluice cluster: it connects to the
// control plane (gRPC, with the cluster token), follows the routing mgmtd
// publishes, and moves file data to and from storage over fabric. Files
// satisfy io.ReaderAt, io.WriterAt and io.Closer; their chunks are placed on
// chains by the file's layout (fsmeta.ChunkChain).
//
// The SDK speaks io/fs's language: Stat and the calls that make inodes
// return *FileInfo (an fs.FileInfo), ReadDir returns DirEntry values (an
// fs.DirEntry), and errors match fs.ErrNotExist, fs.ErrExist,
// fs.ErrInvalid and fs.ErrPermission beside the cluster's own conditions
// (errors.go). Protobuf types stay on the wire. Errno is the one table of
// what a POSIX caller gets for an error, used by the FUSE mount and the
// agent alike.
//
// Entries can be named by absolute path or, with the *At calls, relative to
// a directory inode, as the FUSE adapter (sdk/fuse) names them. Attribute
// changes, truncate (which trims the chunks on storage), hard links and
// fsync (File.Sync) are in attr.go. A small file's handle holds its
// content and hands it to the metadata service at close (inline.go).
//
// Batched I/O (ReadBatch, WriteBatch) moves many ranges of many files in
// one call against registered buffers, grouped per storage node (reads) or
// chain head (writes). Agent is the local agent: it serves other processes
// on this machine through shmring's shared-memory rings, on top of the
// same batched I/O; DialAgent is an application's end of it.
//
// It may import server APIs, fabric and shmring, never dataset.
package sdk
