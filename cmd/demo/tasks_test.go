package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTasksCommand lists one instance's tasks, then with --all every
// instance's in its routing table, the dead one marked.
func TestTasksCommand(t *testing.T) {
	ctx := testCtx(t)
	a, b, c := fakeCluster(t)
	a.tasks = `{"instance":"` + a.addr() + `","tasks":[
		{"task":"1_0","state":"running","thread":0,"stores":[
			{"store":"counts-per-minute","partition":0,"role":"active","position":40,"end":40,"lag":0,"bytes":2048,"keys":9},
			{"store":"counts","partition":0,"role":"active","position":10,"end":10,"lag":0,"bytes":3145728,"keys":120}]},
		{"task":"1_2","state":"standby","thread":1,"stores":[
			{"store":"counts","partition":2,"role":"standby","position":3,"end":10,"lag":7,"bytes":512,"keys":null}]}]}`
	b.tasks = `{"instance":"` + b.addr() + `","tasks":[
		{"task":"1_2","state":"restoring","thread":null,"stores":[
			{"store":"counts","partition":2,"role":"restoring","position":null,"end":120,"lag":null,"rebuilding":true,"bytes":null,"keys":0}]}]}`

	stdout, stderr, err := runCmd(ctx, "", "tasks", "--http", a.addr())
	require.NoError(t, err, stderr)
	require.Equal(t, strings.Join([]string{
		"INSTANCE TASK THREAD STATE STORE ROLE POSITION LAG SIZE KEYS",
		a.addr() + " 1_0 0 running counts/0 active 10 0 3.0 MiB 120",
		a.addr() + " 1_0 0 running counts-per-minute/0 active 40 0 2.0 KiB 9",
		a.addr() + " 1_2 1 standby counts/2 standby 3 7 512 B ?",
		"",
	}, "\n"), squash(stdout))

	stdout, stderr, err = runCmd(ctx, "", "tasks", "--http", a.addr(), "--all")
	require.NoError(t, err, stderr)
	out := squash(stdout)
	require.Contains(t, out, a.addr()+" 1_2 1 standby counts/2 standby 3 7 512 B ?")
	require.Contains(t, out, b.addr()+" 1_2 - restoring counts/2 restoring ? rebuilding ? 0")
	require.Contains(t, out, c+" unreachable: ")

	stdout, _, err = runCmd(ctx, "", "tasks", "--http", a.addr(), "--all", "--json")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 2, "one line per instance that answered:\n%s", stdout)

	_, _, err = runCmd(ctx, "", "tasks", "--http", c)
	require.ErrorContains(t, err, "unreachable: ")
	_, _, err = runCmd(ctx, "", "tasks")
	require.ErrorIs(t, err, errUsage)
}
