// Package dataset turns files in Sluice into training batches: the dataset
// format and its writer, importers, the keyed-permutation sampler, the epoch
// plan that shards steps over ranks and workers, the IO planner, the batcher
// that fills Arrow record batches in registered memory, prefetch, and
// resumable loader state. It imports sdk and below, never cmd.
//
// # Format (version 1)
//
// A dataset NAME is a directory /datasets/NAME in Sluice holding:
//
//	manifest.json      what the dataset is (Manifest): format version, schema,
//	                   sample count, shards, the index's size and SHA-256
//	                   (the dataset's content hash), class names if any
//	index.bin          where every sample is, and its fixed-width values
//	shard-NNNNN.data   sample bytes of the variable-length columns
//
// Columns are variable-length (binary, string) or fixed-width (int8..int64,
// uint8..uint64, float32, float64); no nulls. Tensor columns
// (fixed_size_binary[N], fixed_size_list<T>[N], list<T>, large_list<T> of a
// numeric T) are stored like variable-length ones, a value being its
// elements' little-endian bytes, and load as their Arrow type; the index
// keeps their lengths (checked against the type when it is read), not their
// values. A shard holds a run of
// consecutive samples; within it each sample's variable-length values are
// stored one after the other in schema order, so reading every column of a
// sample is one range. Fixed-width values are small and live in the index,
// which a reader loads whole when it opens the dataset.
//
// index.bin is little-endian, one section after the other, N = samples,
// V = variable-length columns:
//
//	start  [N]uint64        offset of sample i's first value in its shard
//	length [N][V]uint32     length of each variable-length value
//	crc    [N]uint32        CRC32C over the sample's values, every column in
//	                        schema order (fixed-width ones little-endian)
//	fixed  per fixed-width column, [N] values of its width
//
// Sample i lives in the shard whose run holds it (manifest shard counts,
// in order). The content hash covers the index, and the index holds every
// sample's CRC, so the hash changes whenever any byte of the dataset does;
// loader state records it and refuses to resume on a different dataset.
//
// # Loading
//
// An epoch visits positions 0..N-1 of a keyed bijective permutation
// (Permutation, keyed by seed and epoch; identity without shuffle). Steps
// are dealt to ranks in lockstep: step s of rank r covers positions
// [(s*W+r)*B, +B) after the positions already consumed; the remainder
// becomes one final partial step split evenly over ranks (or is dropped
// with DropLast), so every rank takes the same number of steps and no
// sample is repeated to pad. The state is a handful of integers (State):
// resuming — with the same or another world size — continues with exactly
// the positions not yet consumed.
package dataset
