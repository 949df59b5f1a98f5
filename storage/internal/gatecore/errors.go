package gatecore

import (
	"slices"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// The gate's refusals: every one is a typed *ssp2.Error, returned before
// anything is written or rolling back what was.

func invalidCheckpoint(format string, args ...any) error {
	return ssp2.Errorf(ssp2.CodeStorageInvalidCheckpoint, format, args...)
}

// CheckDeclarations validates a build's declarations for schema version
// v, before EnsureSchemaWithCheckpoints begins its transaction.
func CheckDeclarations(decls []storage.CheckpointKey, v int32) error {
	for _, d := range decls {
		if err := d.Check(); err != nil {
			return err
		}
		if d.SchemaVersion != v {
			return invalidCheckpoint("declaration %s is not at the running schema version %d", d, v)
		}
	}
	return nil
}

// CheckAdvance validates progress parameters.
func CheckAdvance(p *storage.CheckpointAdvanceParams) error {
	if err := p.Check(); err != nil {
		return err
	}
	if p.Watermark < 0 || p.ObservedRows < 0 {
		return invalidCheckpoint("watermark %d and observed rows %d must not be negative", p.Watermark, p.ObservedRows)
	}
	return nil
}

// FenceRejected is CodeStorageWriterFenceRejected wrapping the driver's
// error, for the stores' error translation.
func FenceRejected(cause error) error {
	return ssp2.Wrap(ssp2.CodeStorageWriterFenceRejected, "append commit", cause)
}

// checkActivation validates activation parameters before any read.
func checkActivation(p *storage.CheckpointActivateParams) error {
	if err := p.Check(); err != nil {
		return err
	}
	if p.Watermark < 0 {
		return invalidCheckpoint("watermark %d is negative", p.Watermark)
	}
	return nil
}

// checkSources validates activation source tables against the table
// layouts of the stored schema marker.
func checkSources(stored []schema.TableLayout, tables []string) error {
	for _, t := range tables {
		if !slices.ContainsFunc(stored, func(l schema.TableLayout) bool { return l.Name == t }) {
			return invalidCheckpoint("source table %q is not a table of the stored schema", t)
		}
	}
	return nil
}

// checkDeclared returns CodeStorageCheckpointIncomplete when unactivated
// lists a checkpoint decls does not name.
func checkDeclared(unactivated []storage.Checkpoint, decls []storage.CheckpointKey) error {
	var missing []storage.IncompleteCheckpoint
	for _, c := range unactivated {
		if !slices.Contains(decls, c.CheckpointKey) {
			missing = append(missing, storage.IncompleteCheckpoint{Partition: c.Partition, Name: c.Name, SchemaVersion: c.SchemaVersion, State: string(c.State)})
		}
	}
	if len(missing) == 0 {
		return nil
	}
	first := missing[0]
	e := ssp2.Errorf(ssp2.CodeStorageCheckpointIncomplete,
		"%d unactivated checkpoint(s) of schema version %d are not declared by this build, first %s in partition %q",
		len(missing), first.SchemaVersion, first.Name, first.Partition).WithDetails(storage.IncompleteDetails{Missing: missing})
	e.Op = "ensure schema"
	return e
}

// notDeclared is CodeStorageCheckpointNotDeclared for key: absent, or
// activated when activated is true.
func notDeclared(key storage.CheckpointKey, activated bool) error {
	what := "is not declared"
	if activated {
		what = "is already activated"
	}
	return ssp2.Errorf(ssp2.CodeStorageCheckpointNotDeclared, "checkpoint %s %s", key, what)
}

func superseded(key storage.CheckpointKey, have, want int64) error {
	return ssp2.Errorf(ssp2.CodeStorageCheckpointSuperseded, "checkpoint %s: owner epoch %d is not the owner epoch %d", key, have, want)
}

func fenceMissing(key storage.CheckpointKey, required int32, ok bool) error {
	if ok {
		return ssp2.Errorf(ssp2.CodeStorageCheckpointFenceMissing, "checkpoint %s: the partition's writer fence %d is below the checkpoint's schema version", key, required)
	}
	return ssp2.Errorf(ssp2.CodeStorageCheckpointFenceMissing, "checkpoint %s: the partition has no writer fence", key)
}

// invalidWatermark refuses an activation watermark above the log.
func invalidWatermark(watermark, maxSeq int64) error {
	return invalidCheckpoint("watermark %d is above the partition's max commitSeq %d", watermark, maxSeq)
}

// invalidSchemaVersion refuses a declaration at another schema version
// than the stored one (hasMarker false: none is stored).
func invalidSchemaVersion(key storage.CheckpointKey, stored int32, hasMarker bool) error {
	if !hasMarker {
		return invalidCheckpoint("checkpoint %s: no schema is installed", key)
	}
	return invalidCheckpoint("checkpoint %s is not at the stored schema version %d", key, stored)
}
