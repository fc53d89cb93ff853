// Package deploy tests what this directory ships: the FROM scratch image
// and the compose files, with real containers. The tests need a Docker
// engine and run only when STRATA_TEST_DOCKER=1 (.ci/run sets it once it
// has the engine running), so `go test ./...` passes on a machine without
// Docker.
package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
)

const dockerEnv = "STRATA_TEST_DOCKER"

func needDocker(t *testing.T) {
	t.Helper()
	if os.Getenv(dockerEnv) != "1" {
		t.Skipf("set %s=1 to run the container tests (they need a Docker engine; .ci/run sets it)", dockerEnv)
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Fatalf("%s=1 but the Docker engine does not answer: %v\n%s", dockerEnv, err, out)
	}
}

// TestMain removes the image the tests built, once they all ran.
func TestMain(m *testing.M) {
	code := m.Run()
	if image.tag != "" {
		_, _ = tryRun(commandTimeout, nil, "docker", "rmi", "-f", image.tag)
	}
	os.Exit(code)
}

// commandTimeout bounds a docker or compose command; buildTimeout bounds
// building the release binary and the image. A fresh clone's build cache
// holds no static (CGO_ENABLED=0, -trimpath) build, so the first build
// compiles the whole module and the standard library again: under load
// (CI on a shared machine) that took more than the minute every command
// used to have, and the first container test failed in its build while
// the ones after it, with the cache warm, passed.
const (
	commandTimeout = 2 * time.Minute
	buildTimeout   = 8 * time.Minute
)

// run runs a command from this directory, bounded by commandTimeout, and
// returns its output; env is added to the test's environment.
func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	out, err := tryRun(commandTimeout, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func tryRun(timeout time.Duration, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// image is the image the container tests share, built by the first test
// that needs it and removed by TestMain.
var image struct {
	once sync.Once
	tag  string
	err  error
}

// buildImage builds the release binary (static, as the Dockerfile's
// comment says) and the image from this directory's Dockerfile, in a
// context of their own, once for all the tests, and returns the image's
// tag.
func buildImage(t *testing.T) string {
	t.Helper()
	image.once.Do(func() {
		start := time.Now()
		dir, err := os.MkdirTemp("", "strata-image")
		if err != nil {
			image.err = err
			return
		}
		defer os.RemoveAll(dir)
		if out, err := tryRun(buildTimeout, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "strata"), "../cmd/strata"); err != nil {
			image.err = fmt.Errorf("go build of the release binary: %w\n%s", err, out)
			return
		}
		dockerfile, err := os.ReadFile("Dockerfile")
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "Dockerfile"), dockerfile, 0o644)
		}
		if err != nil {
			image.err = err
			return
		}
		tag := fmt.Sprintf("strata-test:%d", os.Getpid())
		if out, err := tryRun(buildTimeout, nil, "docker", "build", "-q", "-t", tag, dir); err != nil {
			image.err = fmt.Errorf("docker build: %w\n%s", err, out)
			return
		}
		image.tag = tag
		t.Logf("built the release binary and image %s in %v", tag, time.Since(start).Round(time.Millisecond))
	})
	if image.err != nil {
		t.Fatal(image.err)
	}
	return image.tag
}

// TestComposeFilesParse checks both compose files with whichever Compose
// deploy/compose finds.
func TestComposeFilesParse(t *testing.T) {
	needDocker(t)
	for _, f := range []string{"docker-compose.yml", "docker-compose.cluster.yml"} {
		run(t, nil, "./compose", "-f", f, "config", "-q")
	}
}

// TestComposeCluster starts docker-compose.cluster.yml's three nodes from a
// freshly built image and uses them from the host with a real client:
// three brokers listed, records produced and consumed; then the active
// controller's container is SIGKILLed (docker kill): another node is
// elected, topics can still be created, and the records are still there.
func TestComposeCluster(t *testing.T) {
	needDocker(t)
	image := buildImage(t)
	// A project and a subnet of its own, so that it cannot meet a
	// cluster someone runs with the defaults.
	project := fmt.Sprintf("stratatest%d", os.Getpid())
	subnet := fmt.Sprintf("172.28.%d", 100+os.Getpid()%150)
	env := []string{"STRATA_IMAGE=" + image, "STRATA_SUBNET=" + subnet}
	compose := func(args ...string) string {
		t.Helper()
		return run(t, env, "./compose", append([]string{"-p", project, "-f", "docker-compose.cluster.yml"}, args...)...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := tryRun(commandTimeout, env, "./compose", "-p", project, "-f", "docker-compose.cluster.yml", "logs", "--no-color")
			t.Logf("containers' logs:\n%s", out)
		}
		out, err := tryRun(commandTimeout, env, "./compose", "-p", project, "-f", "docker-compose.cluster.yml", "down", "-v", "-t", "5")
		if err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
	})
	compose("up", "-d", "--no-build")

	addr := func(id int32) string { return fmt.Sprintf("%s.%d:9092", subnet, 10+id) }
	seeds := []string{addr(1), addr(2), addr(3)}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// Every node, asked on its own, lists the three brokers at the
	// addresses the compose file gives them.
	for n := int32(1); n <= 3; n++ {
		one, err := kgo.NewClient(kgo.SeedBrokers(addr(n)))
		if err != nil {
			t.Fatal(err)
		}
		poll.UntilStatus(t, 90*time.Second, fmt.Sprintf("node %d to list three brokers", n), func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := one.SeedBrokers()[0].Request(ctx, kmsg.NewPtrMetadataRequest())
			if err != nil {
				return false, err.Error()
			}
			var got []string
			for _, b := range resp.(*kmsg.MetadataResponse).Brokers {
				got = append(got, fmt.Sprintf("%d@%s:%d", b.NodeID, b.Host, b.Port))
			}
			slices.Sort(got)
			want := []string{"1@" + addr(1), "2@" + addr(2), "3@" + addr(3)}
			return slices.Equal(got, want), fmt.Sprint(got)
		})
		one.Close()
	}

	// Each request has a deadline of its own: one context shared by
	// the whole test left the requests after the kill only what the
	// produce phase had not used, which under load was not enough.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	resp, err := adm.CreateTopic(ctx, 6, 3, nil, "orders")
	cancel()
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(6) {
		for i := range 10 {
			r := &kgo.Record{Topic: "orders", Partition: p, Value: fmt.Appendf(nil, "%d-%d", p, i)}
			poll.UntilStatus(t, 30*time.Second, fmt.Sprintf("a record produced to orders/%d", p), func() (bool, string) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				err := cl.ProduceSync(ctx, r).FirstErr()
				return err == nil, fmt.Sprint(err)
			})
		}
	}
	if n := consume(t, seeds, "orders", 60); n != 60 {
		t.Fatalf("consumed %d of 60 records", n)
	}

	// SIGKILL the active controller's container.
	leader, err := quorumLeader(cl)
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(compose("ps", "-q", fmt.Sprintf("strata-%d", leader)))
	killed := time.Now()
	run(t, nil, "docker", "kill", id)
	var survivors []string
	for n := int32(1); n <= 3; n++ {
		if n != leader {
			survivors = append(survivors, addr(n))
		}
	}
	// Ask a survivor itself: a client that follows Metadata's controller
	// would first wait out its dial timeout on the killed container's
	// address, which no longer answers at all (no refusal, as on
	// loopback).
	after, err := kgo.NewClient(kgo.SeedBrokers(survivors[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	survivor := after.SeedBrokers()[0]
	poll.UntilStatus(t, 60*time.Second, "a new quorum leader", func() (bool, string) {
		l, err := quorumLeader(survivor)
		return err == nil && l > 0 && l != leader, fmt.Sprint("leader ", l, " ", err)
	})
	elected := time.Since(killed)
	poll.UntilStatus(t, 60*time.Second, "a topic created after the kill", func() (bool, string) {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "after-the-kill", 3, 1
		req.Topics = append(req.Topics, rt)
		req.TimeoutMillis = 5000
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, survivor)
		if err == nil {
			err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
		}
		return err == nil || errors.Is(err, kerr.TopicAlreadyExists), fmt.Sprint(err)
	})
	t.Logf("node %d's container killed; node %s names another quorum leader %v later, and creates a topic %v later",
		leader, survivors[0], elected.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	// orders has three replicas: once the killed broker is fenced, its
	// partitions are led by the others and every record reads back.
	if n := consume(t, survivors, "orders", 60); n != 60 {
		t.Fatalf("after the kill consumed %d of 60 records", n)
	}
}

// quorumLeader is the metadata quorum's leader (DescribeQuorum), as cl
// (a client, or one broker) answers.
func quorumLeader(cl kmsg.Requestor) (int32, error) {
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = "__cluster_metadata"
	rt.Partitions = append(rt.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return -1, fmt.Errorf("no partition in %+v", resp)
	}
	p := resp.Topics[0].Partitions[0]
	return p.LeaderID, kerr.ErrorForCode(p.ErrorCode)
}

// consume reads topic from its start until it has n records or 60 s pass.
func consume(t *testing.T, seeds []string, topic string, n int) int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := 0
	for got < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(*kgo.Record) { got++ })
	}
	return got
}
