package integration

import "github.com/eddystreams/eddy/integration/fixture"

// The word-count fixture the integration test packages share, by the names
// this package's tests use.
const (
	inputTopic    = fixture.InputTopic
	outputTopic   = fixture.OutputTopic
	countsStore   = fixture.CountsStore
	groupByName   = fixture.GroupByName
	settleTimeout = fixture.SettleTimeout
	pollEvery     = fixture.PollEvery
)

type (
	corpus    = fixture.Corpus
	logBuffer = fixture.LogBuffer
)

var (
	newCorpus           = fixture.NewCorpus
	waitFor             = fixture.WaitFor
	tokenize            = fixture.Tokenize
	requireCounts       = fixture.RequireCounts
	countDiff           = fixture.CountDiff
	readCommittedLatest = fixture.ReadCommittedLatest
	repartitionTopic    = fixture.RepartitionTopic
)
