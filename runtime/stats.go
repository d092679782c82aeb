package runtime

import "time"

// Stats counts what an instance did since it started that an operator or a
// test may want to see without scraping Metrics: records it skipped, the
// recoveries it went through, the state it restored. Every figure is read
// when Stats is called; the struct is a snapshot and does not change
// afterwards. What a task dropped is counted per task (TaskInfo.DroppedLate,
// TaskInfo.DroppedJoin in App.Tasks).
type Stats struct {
	// Skipped counts the input records skipped because they could not be
	// deserialized (with DeserializationLogAndSkip).
	Skipped int64
	// ProcessingErrors counts the records skipped because a processor
	// failed on them (ProcessingLogAndContinue).
	ProcessingErrors int64
	// EnforcedProcessing counts the records tasks reading several
	// partitions processed while one of their partitions was empty and
	// known to be at its end, once Config.TaskIdleTime had passed for it
	// (Kafka Streams' enforced processing): their order against records
	// produced later to that partition is not by timestamp.
	EnforcedProcessing int64

	// ThreadsReplaced counts the stream threads ReplaceThread replaced.
	ThreadsReplaced int64
	// Rejoins counts the times a stream thread joined the group again
	// because the group had moved on without it (its offset commit was
	// refused as from an old generation) or, under at-least-once, because
	// its commit could not reach the broker in time: its uncommitted work
	// was dropped and is processed again, which under at-least-once may
	// count it once more.
	Rejoins int64
	// Rewires counts the times the instance found its topics deleted or
	// recreated under it and rebuilt its clients and state.
	Rewires int64
	// DiskFullWaits counts the times a store write, or a store's opening,
	// was refused for a full disk (statestore.ErrDiskFull) and the
	// instance paused to retry it.
	DiskFullWaits int64

	// StoresWiped counts the persistent stores found damaged on disk (or
	// written as another kind of window store), deleted and rebuilt from
	// their changelogs.
	StoresWiped int64
	// StoreResets counts the stores emptied and rebuilt from their
	// changelogs because their changelog position no longer fitted the
	// changelog: a position past the changelog's end (the topic was
	// deleted and created again, or the broker reset, while the state
	// directory was kept) or below its log start (records the store never
	// applied were deleted). Restorations, standbys and global stores
	// (each emptied whole) all count. Stores whose changelog topic has
	// another ID than the one they were written from are deleted rather
	// than reset in place (see wipe.go); each counts as one reset.
	StoreResets int64
	// RestoredRecords counts the changelog records applied by every
	// restoration that finished, including those of tasks the instance no
	// longer holds.
	RestoredRecords int64

	// GlobalRestoredRecords counts the records the global thread applied
	// while restoring the global stores: the whole topics on a first
	// start, only what they gained since on a restart with the state
	// directory kept. Records applied while following the topics after
	// that are GlobalFollowedRecords.
	GlobalRestoredRecords int64
	// GlobalRestoreDuration is how long the restoration of the global
	// stores at Start took, from the registration of their partitions to
	// the last one reaching its end offset; 0 until it is done.
	GlobalRestoreDuration time.Duration
	// GlobalFollowedRecords counts the records the global thread applied
	// following the global topics once restored.
	GlobalFollowedRecords int64
}

// Stats returns the instance's counters as they are now. It takes none of
// the locks a change of State holds, so a StateListener may call it.
func (a *App) Stats() Stats {
	return Stats{
		Skipped:               a.skipped.Load(),
		ProcessingErrors:      a.processingErrors.Load(),
		EnforcedProcessing:    a.enforced.Load(),
		ThreadsReplaced:       a.replaced.Load(),
		Rejoins:               a.rejoins.Load(),
		Rewires:               a.rewires.Load(),
		DiskFullWaits:         a.diskFullWaits.Load(),
		StoresWiped:           a.storesWiped.Load(),
		StoreResets:           a.storeResets(),
		RestoredRecords:       a.restored.total(),
		GlobalRestoredRecords: a.globalRestoredRecords(),
		GlobalRestoreDuration: a.globalRestoreDuration(),
		GlobalFollowedRecords: a.globalFollowedRecords(),
	}
}
