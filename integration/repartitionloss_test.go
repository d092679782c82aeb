package integration

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/runtime"
)

// TestRepartitionRecordsDeletedUnreadFailLoudly deletes records of a
// repartition partition above the group's committed offset while the
// application is down: the consumer that resumes from the commit finds its
// position below the log start, and franz-go moves it up to the log start
// without a word. The counts those records carried are lost, so the thread
// must fail with the gap as soon as input reaches the partition rather than
// carry on.
func TestRepartitionRecordsDeletedUnreadFailLoudly(t *testing.T) {
	for _, g := range []runtime.ProcessingGuarantee{runtime.AtLeastOnce, runtime.ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) {
			c := newCluster(t, 2)
			cfg := instanceConfig{appID: "lost", stateDir: t.TempDir(), guarantee: g}
			in := c.start(t, "a", cfg)
			want := make(map[string]int64)
			c.produceLines(t, newCorpus(3, 200).Lines(2_000, want))
			c.waitCaughtUp(t, "lost")
			in.close(t)

			// Raw records (a grouping's unmarked records are folded in
			// like partials of one), then all of the partition deleted.
			topic := repartitionTopic("lost")
			recs := make([]*kgo.Record, 50)
			for i := range recs {
				recs[i] = &kgo.Record{Topic: topic, Partition: 0, Key: []byte("deleted"), Value: []byte("deleted")}
			}
			c.produce(t, recs...)
			end := c.endOffsets(t, topic)[topic][0]
			del := make(kadm.Offsets)
			del.Add(kadm.Offset{Topic: topic, Partition: 0, At: end, LeaderEpoch: -1})
			resp, err := c.adm.DeleteRecords(ctx(t), del)
			require.NoError(t, err)
			require.NoError(t, resp.Error())

			in = c.start(t, "a", cfg)
			gen := newCorpus(4, 200)
			c.produceLines(t, gen.Lines(2_000, want))
			// Unchecked, the instance takes the new input as if nothing
			// were missing and catches up.
			waitFor(t, settleTimeout, "the instance to fail or to catch up", func() (bool, string) {
				if in.Err() != nil {
					return true, ""
				}
				com, err := c.committed(t, "lost", inputTopic, topic)
				if err != nil {
					return false, err.Error()
				}
				ends := c.endOffsets(t, inputTopic, topic)
				for _, tp := range []string{inputTopic, topic} {
					for p, end := range ends[tp] {
						if com[tp][p] != end {
							return false, fmt.Sprintf("%s/%d committed %d of %d", tp, p, com[tp][p], end)
						}
					}
				}
				return true, ""
			})
			err = in.Err()
			require.Error(t, err, "the instance carried on past deleted records")
			require.Contains(t, err.Error(), "deleted before they were processed")
		})
	}
}
