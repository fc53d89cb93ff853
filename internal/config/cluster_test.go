package config

import (
	"strings"
	"testing"
)

func TestClusterCombinations(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets map[string]string
		err  string // "" when valid; else the key the error names
	}{
		{"zero configuration", nil, ""},
		{"three combined nodes", map[string]string{
			"node.id": "2", "controller.quorum.voters": "1@h1:9093,2@h2:9093,3@h3:9093",
			"listeners": "PLAINTEXT://:9092,CONTROLLER://:9093"}, ""},
		{"broker only", map[string]string{
			"process.roles": "broker", "node.id": "4", "controller.quorum.voters": "1@h1:9093"}, ""},
		{"controller only", map[string]string{
			"process.roles": "controller", "node.id": "1", "controller.quorum.voters": "1@h1:9093",
			"listeners": "CONTROLLER://:9093"}, ""},
		{"controller not a voter", map[string]string{
			"node.id": "5", "controller.quorum.voters": "1@h1:9093,2@h2:9093",
			"listeners": "PLAINTEXT://:9092,CONTROLLER://:9093"}, "controller.quorum.voters"},
		{"duplicate voters", map[string]string{
			"node.id": "1", "controller.quorum.voters": "1@h1:9093,1@h2:9093",
			"listeners": "PLAINTEXT://:9092,CONTROLLER://:9093"}, "controller.quorum.voters"},
		{"broker without voters", map[string]string{"process.roles": "broker"}, "controller.quorum.voters"},
		{"controller without a controller listener", map[string]string{
			"node.id": "1", "controller.quorum.voters": "1@h1:9093"}, "listeners"},
		{"bad voter", map[string]string{"controller.quorum.voters": "h1:9093"}, "controller.quorum.voters"},
		{"unknown role", map[string]string{"process.roles": "broker,zookeeper"}, "process.roles"},
		{"unknown inter-broker listener", map[string]string{"inter.broker.listener.name": "INTERNAL"}, "inter.broker.listener.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewServer(tc.sets)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && err == nil:
				t.Fatalf("accepted; want an error naming %s", tc.err)
			case tc.err != "" && !strings.Contains(err.Error(), tc.err):
				t.Fatalf("error %q does not name %s", err, tc.err)
			}
		})
	}
	s, _ := NewServer(map[string]string{"node.id": "2", "controller.quorum.voters": "1@h1:9093,2@h2:9094,3@h3:9093",
		"listeners": "PLAINTEXT://:9092,CONTROLLER://:9094"})
	c, _ := s.Cluster()
	if len(c.Voters) != 3 || c.Voters[1].Addr() != "h2:9094" || c.Controller.Port != 9094 || c.Client.Port != 9092 || c.Alone {
		t.Fatalf("cluster: %+v", c)
	}
}
