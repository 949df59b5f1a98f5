// Package ssp2 is the SSP2 codec: the binary sync protocol of the Syncular
// project, wire versions 1 and 2 (SPEC.md, release 0.15.48).
//
// It holds the strict primitives, the message envelope with every request
// and response frame, the row codec compiled from a column list, SSG2 rows
// segments, realtime control messages, the canonical JSON debug rendering
// (§11) and the scope digest (§3.5). It is pure: no I/O beyond the
// io.Writer a streaming encoder is given, and it imports nothing of
// syncnode's own.
//
// Every decode failure is an *Error carrying its SSP2 code; no input can
// make a decoder panic.
package ssp2
