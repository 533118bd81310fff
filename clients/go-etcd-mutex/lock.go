package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

// The worker gives open, release and close 10 s each before it kills us; our
// own bound is shorter so a slow service is answered as a failure, not as a
// client that stopped answering.
const opTimeout = 8 * time.Second

// client is what one Go application would hold: an etcd client, its current
// session, and the mutex it locked last.
type client struct {
	out       *out
	cli       *clientv3.Client
	endpoints string
	sess      *session
	mu        *concurrency.Mutex
}

// session is a concurrency.Session plus whether we ended it ourselves: Done()
// closes on Close() too, and that is no loss to report.
type session struct {
	s      *concurrency.Session
	closed int32
}

// open starts a new session (a lease kept alive by the library) on the
// endpoints given, which run through the worker's fault proxies.
func (c *client) open(req request) (map[string]interface{}, error) {
	if len(req.Endpoints) == 0 {
		return nil, errors.New("open without endpoints")
	}
	// A previous session (lost, or never closed) is dropped: the protocol holds
	// one session at a time. Its lease is left to expire, as after a loss.
	c.dropSession()
	c.mu = nil

	eps := strings.Join(req.Endpoints, ",")
	if c.cli != nil && c.endpoints != eps {
		c.cli.Close()
		c.cli = nil
	}
	if c.cli == nil {
		// AutoSyncInterval stays 0: the client must not learn the members'
		// own addresses and go around the proxies.
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   req.Endpoints,
			DialTimeout: 5 * time.Second,
		})
		if err != nil {
			return nil, fmt.Errorf("clientv3.New(%s): %v", eps, err)
		}
		c.cli, c.endpoints = cli, eps
	}

	// WithTTL takes whole seconds; below 1 the library would use its 60 s
	// default, which is not the TTL asked for.
	ttl := int((req.TTLms + 999) / 1000)
	if ttl < 1 {
		ttl = 1
	}
	s, err := newSessionBounded(c.cli, ttl)
	if err != nil {
		return nil, err
	}
	sess := &session{s: s}
	c.sess = sess
	go c.watch(sess)
	log.Printf("session %d (lease %x) ttl %ds on %s", int64(s.Lease()), int64(s.Lease()), ttl, eps)
	return map[string]interface{}{"session": int64(s.Lease())}, nil
}

// newSessionBounded calls concurrency.NewSession, which has no deadline of its
// own (its context also bounds the keepalive, so it cannot be a timeout). If
// it outlasts opTimeout, the open fails and the session it makes later is
// closed at once, so no lease is kept alive for nobody.
func newSessionBounded(cli *clientv3.Client, ttl int) (*concurrency.Session, error) {
	type result struct {
		s   *concurrency.Session
		err error
	}
	done := make(chan result, 1)
	var abandoned int32
	go func() {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
		if err == nil && atomic.LoadInt32(&abandoned) == 1 {
			log.Printf("late session %d closed: its open had already failed", int64(s.Lease()))
			s.Close()
			return
		}
		done <- result{s, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("concurrency.NewSession: %v", r.err)
		}
		return r.s, nil
	case <-time.After(opTimeout):
		atomic.StoreInt32(&abandoned, 1)
		// The goroutine may have finished between the timer and the store.
		select {
		case r := <-done:
			if r.err == nil {
				r.s.Close()
			}
		default:
		}
		return nil, fmt.Errorf("concurrency.NewSession: no answer within %s", opTimeout)
	}
}

// watch reports the session's end when the library tells its user: Done()
// closes when the keepalive stops (lease expired or revoked, keepalive
// failed). That is the only signal a Go user gets.
func (c *client) watch(sess *session) {
	<-sess.s.Done()
	if atomic.LoadInt32(&sess.closed) == 1 {
		return
	}
	id := int64(sess.s.Lease())
	log.Printf("session %d lost: Session.Done() closed", id)
	c.out.send(map[string]interface{}{
		"event":   "session-lost",
		"session": id,
		"reason":  "Session.Done() closed (lease keepalive ended)",
	})
}

// acquire locks as the library does, with no deadline of our own: Lock waits
// as long as it waits.
func (c *client) acquire(req request) (map[string]interface{}, error) {
	if c.sess == nil {
		return nil, errors.New("acquire without an open session")
	}
	if req.Lock == "" {
		return nil, errors.New("acquire without a lock name")
	}
	m := concurrency.NewMutex(c.sess.s, req.Lock)
	if err := m.Lock(context.Background()); err != nil {
		return nil, fmt.Errorf("Mutex.Lock(%s): %v", req.Lock, err)
	}
	c.mu = m
	key := m.Key()
	// What a Go user has at hand after Lock: the response header of the
	// request that found the lock free. Its revision is the store's revision
	// then, not the lock key's own.
	headerRev := m.Header().Revision
	fields := map[string]interface{}{
		"token": headerRev,
		"entry": key,
	}
	tokens := map[string]interface{}{"header_revision": headerRev}
	// The lock key's CreateRevision is the service's order of grants; the
	// library does not hand it out, so read it as a user would have to.
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	resp, err := c.cli.Get(ctx, key)
	cancel()
	switch {
	case err != nil:
		log.Printf("Get(%s) after Lock: %v (create_revision unknown)", key, err)
		tokens["create_revision"] = nil
	case len(resp.Kvs) == 0:
		// Lock returned although our key is gone: the session expired while
		// we waited (etcd 3.4's Mutex does not look again).
		log.Printf("Get(%s) after Lock: the key is gone (create_revision unknown)", key)
		tokens["create_revision"] = nil
	default:
		rev := resp.Kvs[0].CreateRevision
		tokens["create_revision"] = rev
		fields["revision"] = rev
	}
	fields["tokens"] = tokens
	log.Printf("locked %s: header revision %d, %v", key, headerRev, tokens["create_revision"])
	return fields, nil
}

func (c *client) release() error {
	if c.mu == nil {
		return errors.New("release without a lock held")
	}
	m := c.mu
	c.mu = nil
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := m.Unlock(ctx); err != nil {
		return fmt.Errorf("Mutex.Unlock: %v", err)
	}
	return nil
}

// close ends the session: Session.Close stops the keepalive and revokes the
// lease (bounded by the TTL inside the library). A failed revoke is logged,
// not an error: the keepalive has stopped, so the lease ends by its TTL.
func (c *client) close() error {
	c.mu = nil
	if c.sess == nil {
		return nil
	}
	sess := c.sess
	c.sess = nil
	atomic.StoreInt32(&sess.closed, 1)
	done := make(chan error, 1)
	go func() { done <- sess.s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			log.Printf("Session.Close: %v (the lease ends by its TTL)", err)
		}
	case <-time.After(opTimeout):
		log.Printf("Session.Close: no answer within %s (the lease ends by its TTL)", opTimeout)
	}
	return nil
}

// dropSession forgets the current session without revoking its lease (Orphan
// stops the keepalive at once, with no request to the service).
func (c *client) dropSession() {
	if c.sess == nil {
		return
	}
	atomic.StoreInt32(&c.sess.closed, 1)
	c.sess.s.Orphan()
	c.sess = nil
}

func (c *client) shutdown() {
	c.close()
	if c.cli != nil {
		c.cli.Close()
	}
}
