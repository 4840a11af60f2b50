package sdk

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sluicefs/sluice/shmring"
)

// AgentConn is an application's connection to a local agent, usable from
// any process on the agent's machine: the shared-memory rings and Iov of a
// shmring.Client (Submit, Reap, Iov), plus opening and closing the files
// that entries name. It needs no cluster connection of its own.
type AgentConn struct {
	*shmring.Client
}

// DialAgent connects to the agent at path with an Iov of iovSize bytes and
// rings of depth entries (a power of two), on huge pages when wantHuge and
// some are reserved, on normal pages otherwise (Iov.Huge says which).
func DialAgent(path string, iovSize, depth int, wantHuge bool) (*AgentConn, error) {
	c, err := shmring.Dial(path, iovSize, depth, wantHuge)
	if err != nil {
		return nil, err
	}
	return &AgentConn{Client: c}, nil
}

func (ac *AgentConn) call(ctx context.Context, req agentRequest) (agentReply, error) {
	b, _ := json.Marshal(req)
	var r agentReply
	resp, err := ac.Call(ctx, b)
	if err != nil {
		return r, fmt.Errorf("%s %s: %w", req.Op, req.Path, err)
	}
	if err := json.Unmarshal(resp, &r); err != nil {
		return r, fmt.Errorf("%s %s: agent's answer: %w", req.Op, req.Path, err)
	}
	return r, nil
}

// Open opens a file through the agent, for writing too when write is set,
// and returns the number entries name it by and its length.
func (ac *AgentConn) Open(ctx context.Context, path string, write bool) (file uint64, size int64, err error) {
	r, err := ac.call(ctx, agentRequest{Op: "open", Path: path, Write: write})
	return r.File, r.Size, err
}

// Create makes a new empty file and opens it for writing through the
// agent.
func (ac *AgentConn) Create(ctx context.Context, path string) (file uint64, err error) {
	r, err := ac.call(ctx, agentRequest{Op: "open", Path: path, Create: true})
	return r.File, err
}

// CloseFile closes a file opened through the agent and returns its length;
// for a file open for writing, that length becomes what others see.
func (ac *AgentConn) CloseFile(ctx context.Context, file uint64) (size int64, err error) {
	r, err := ac.call(ctx, agentRequest{Op: "close", File: file})
	return r.Size, err
}
