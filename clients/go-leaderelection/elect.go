package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// The worker gives open, release and close 10 s each before it kills us; our own bound
// is shorter so a slow apiserver is answered as a failure, not as a client that stopped
// answering.
const opTimeout = 8 * time.Second

// client is what one Go controller holds: a client for the apiserver, and the elector
// it runs now (at most one: the protocol holds one lock at a time).
type client struct {
	out *out
	// How the controller using the elector is written (command-line flags, see main.go).
	opts   options
	leases coordinationv1client.LeasesGetter
	ttl    time.Duration
	// The renew deadline and retry period open was given (0: from the TTL, timing).
	renew, retry time.Duration
	// Opens and acquires so far: the identity made up when the worker gives no owner.
	opened   int64
	acquires int64
	el       *election
}

// election is one LeaderElector's Run: started by acquire, ended by release or close
// (stopping: we cancelled it) or by client-go itself (OnStoppedLeading unprompted).
type election struct {
	identity string
	cancel   context.CancelFunc
	done     chan struct{}
	stopping int32
}

// open builds the client a controller builds from its kubeconfig: the apiserver at the
// endpoint given (through the worker's fault proxy), the bearer token, the CA (PEM text:
// a kubeconfig's certificate-authority-data), and the name the serving certificate is
// for: the proxy's address is not in it, so the certificate is checked against that
// name (a kubeconfig's tls-server-name).
func (c *client) open(req request) (map[string]interface{}, error) {
	if req.Service != "kubernetes" {
		return nil, fmt.Errorf("service %q: this client speaks only to kubernetes", req.Service)
	}
	if len(req.Endpoints) != 1 {
		// client-go talks to one apiserver URL (a load balancer in front of several).
		return nil, fmt.Errorf("open with %d endpoints: client-go takes one apiserver", len(req.Endpoints))
	}
	if req.BearerToken == "" || req.CAPem == "" {
		return nil, errors.New("open without bearer_token or ca_pem")
	}
	// The Lease stores whole seconds (leaseDurationSeconds); below 1 s client-go would
	// write 0, which the apiserver refuses.
	if req.TTLms < 1000 {
		return nil, fmt.Errorf("ttl_ms %d: a Lease's duration is whole seconds, at least 1000", req.TTLms)
	}
	if req.RenewDeadlineMs < 0 || req.RetryPeriodMs < 0 {
		return nil, fmt.Errorf("renew_deadline_ms %d, retry_period_ms %d: negative", req.RenewDeadlineMs, req.RetryPeriodMs)
	}
	c.stop()
	cfg := &rest.Config{
		Host:        "https://" + req.Endpoints[0],
		BearerToken: req.BearerToken,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: []byte(req.CAPem),
			// Empty: the endpoint's host, as client-go does by default.
			ServerName: req.TLSServerName,
		},
		// A request must not outlive the worker's patience; client-go's elector bounds
		// its own renewals by RenewDeadline through the context.
		Timeout: opTimeout,
	}
	cs, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %v", cfg.Host, err)
	}
	c.leases, c.ttl = cs, time.Duration(req.TTLms)*time.Millisecond
	c.renew = time.Duration(req.RenewDeadlineMs) * time.Millisecond
	c.retry = time.Duration(req.RetryPeriodMs) * time.Millisecond
	c.opened++
	lease, renew, retry := c.timing()
	log.Printf("open %d: %s (certificate checked for %q), lease %s, renew deadline %s, retry %s",
		c.opened, cfg.Host, req.TLSServerName, lease, renew, retry)
	// No session in the service: an elector's term lives in the Lease it writes.
	return map[string]interface{}{"session": 0}, nil
}

// timing is client-go's three durations. LeaseDuration is the TTL (how long others wait
// after they last saw the record change). RenewDeadline and RetryPeriod are open's
// renew_deadline_ms and retry_period_ms; when not given, RenewDeadline = 2/3 of the TTL,
// client-go's own ratio (kube-controller-manager: 15 s / 10 s), and RetryPeriod = 1/6
// (the default is 2/15): renewals every ttl/6 leave four tries inside the renew deadline
// and keep RenewDeadline > 1.2 × RetryPeriod, which NewLeaderElector requires (and
// checks: values given that break it fail the acquire with client-go's own error).
func (c *client) timing() (lease, renew, retry time.Duration) {
	lease, renew, retry = c.ttl, c.ttl*2/3, c.ttl/6
	if c.renew > 0 {
		renew = c.renew
	}
	if c.retry > 0 {
		retry = c.retry
	}
	return lease, renew, retry
}

// grantWrite is the Lease as the apiserver returned it from this elector's first
// successful write: the write that took the lock (client-go writes on every success of
// tryAcquireOrRenew, and the first one of a Run is the acquisition). Read back with a
// Get instead, it could already be the first renewal's: the renew loop starts at once.
type grantWrite struct {
	mu    sync.Mutex
	lease *coordinationv1.Lease
}

func (g *grantWrite) keep(l *coordinationv1.Lease) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lease == nil {
		g.lease = l.DeepCopy()
	}
}

func (g *grantWrite) get() *coordinationv1.Lease {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lease
}

// recordingLeases is client-go's own typed Lease client; only Create and Update are
// looked at, to keep what the apiserver answered. LeaseLock itself is client-go's,
// unchanged.
type recordingLeases struct {
	coordinationv1client.LeasesGetter
	grant *grantWrite
}

func (r recordingLeases) Leases(ns string) coordinationv1client.LeaseInterface {
	return recordingLease{r.LeasesGetter.Leases(ns), r.grant}
}

type recordingLease struct {
	coordinationv1client.LeaseInterface
	grant *grantWrite
}

func (r recordingLease) Create(ctx context.Context, l *coordinationv1.Lease, o metav1.CreateOptions) (*coordinationv1.Lease, error) {
	got, err := r.LeaseInterface.Create(ctx, l, o)
	if err == nil {
		r.grant.keep(got)
	}
	return got, err
}

func (r recordingLease) Update(ctx context.Context, l *coordinationv1.Lease, o metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	got, err := r.LeaseInterface.Update(ctx, l, o)
	if err == nil {
		r.grant.keep(got)
	}
	return got, err
}

// acquire runs a LeaderElector on the Lease `namespace/name` and answers when
// OnStartedLeading fires; it waits as long as the elector does.
func (c *client) acquire(req request) (map[string]interface{}, error) {
	if c.leases == nil {
		return nil, errors.New("acquire before open")
	}
	if c.el != nil {
		select {
		case <-c.el.done:
			// Lost earlier (OnStoppedLeading told the worker); nothing left to stop.
			c.el = nil
		default:
			return nil, errors.New("acquire while an elector still runs (release first)")
		}
	}
	ns, name := "default", req.Lock
	if i := strings.IndexByte(req.Lock, '/'); i >= 0 {
		ns, name = req.Lock[:i], req.Lock[i+1:]
	}
	if ns == "" || name == "" {
		return nil, fmt.Errorf("lock %q is not namespace/name", req.Lock)
	}
	c.acquires++
	// The identity is the owner the worker gives (the harness reads which worker and
	// session hold the Lease off it); without one, a new candidate identity per acquire,
	// as a restarted controller pod is, so a grant's holderIdentity tells it apart from
	// this client's earlier ones.
	identity := req.Owner
	if identity == "" {
		identity = fmt.Sprintf("%s-%d-%d-%d", os.Getenv("FENCECHECK_WORKER"), os.Getpid(), c.opened, c.acquires)
	}
	el := &election{identity: identity, done: make(chan struct{})}
	grant := &grantWrite{}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
		Client:     recordingLeases{c.leases, grant},
		LockConfig: resourcelock.ResourceLockConfig{Identity: el.identity},
	}
	started := make(chan struct{})
	lease, renew, retry := c.timing()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   lease,
		RenewDeadline:   renew,
		RetryPeriod:     retry,
		ReleaseOnCancel: c.opts.releaseOnCancel,
		Name:            "fencecheck",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				log.Printf("%s: OnStartedLeading", el.identity)
				close(started)
			},
			OnStoppedLeading: func() { c.stopped(el) },
			OnNewLeader: func(id string) {
				log.Printf("%s: OnNewLeader %s", el.identity, id)
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("NewLeaderElector: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	el.cancel = cancel
	c.el = el
	log.Printf("%s: electing on lease %s/%s (lease %s, renew deadline %s, retry %s)",
		el.identity, ns, name, lease, renew, retry)
	go func() {
		defer close(el.done)
		le.Run(ctx)
	}()
	select {
	case <-started:
	case <-el.done:
		// Run ends before leading only when cancelled, which only we do; say so anyway.
		c.el = nil
		return nil, errors.New("the elector returned without leading")
	}
	l := grant.get()
	if l == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != el.identity {
		return nil, fmt.Errorf("%s: leading, but no write of ours was seen (%v)", el.identity, l)
	}
	transitions := int64(0)
	if l.Spec.LeaseTransitions != nil {
		transitions = int64(*l.Spec.LeaseTransitions)
	}
	tokens := map[string]interface{}{"lease_transitions": transitions, "resource_version": l.ResourceVersion}
	fields := map[string]interface{}{
		// What a client-go user has: LeaderElectionRecord.LeaderTransitions.
		"token":  transitions,
		"tokens": tokens,
		// The Lease's name: what the harness's watch of namespace default records as
		// the entry (the lock's namespace is the acquire's).
		"entry": name,
		"value": el.identity,
	}
	// resourceVersion is an opaque string to clients; on etcd it is the revision of the
	// write, an integer, which is the service's order of grants.
	if rv, err := strconv.ParseInt(l.ResourceVersion, 10, 64); err == nil {
		tokens["resource_version"] = rv
		fields["revision"] = rv
	}
	log.Printf("%s: leading %s/%s: resourceVersion %s, leaseTransitions %d",
		el.identity, ns, name, l.ResourceVersion, transitions)
	if c.opts.stepDownAfter > 0 {
		go c.stepDown(el)
	}
	return fields, nil
}

// stepDown is a controller told to stop leading while its work still runs (a SIGTERM
// during a rollout cancelling the context it gave Run, as client-go's own example does):
// stepDownAfter into its term it cancels the elector's context, whatever the worker's
// hold is doing. Run then returns at once; with ReleaseOnCancel client-go first clears
// the Lease's holder (kubernetes/kubernetes#139504, #139991: it does not wait for
// OnStartedLeading's work), so another elector takes the Lease while the worker — the
// work OnStartedLeading started — still reads and writes. Without ReleaseOnCancel the
// Lease stays held until it expires. OnStoppedLeading then tells the worker
// (`session-lost`), as client-go tells a controller once Run returns.
func (c *client) stepDown(el *election) {
	select {
	case <-el.done:
		return
	case <-time.After(c.opts.stepDownAfter):
	}
	if atomic.LoadInt32(&el.stopping) == 1 {
		return
	}
	log.Printf("%s: stepping down (context cancelled %s into the term; ReleaseOnCancel %v)",
		el.identity, c.opts.stepDownAfter, c.opts.releaseOnCancel)
	el.cancel()
}

// stopped is OnStoppedLeading: client-go calls it whenever Run returns. Unprompted, it
// means a renewal has not succeeded for RenewDeadline: the lock is lost, and that is
// what a controller is told (it should stop working).
func (c *client) stopped(el *election) {
	if atomic.LoadInt32(&el.stopping) == 1 {
		log.Printf("%s: OnStoppedLeading (released)", el.identity)
		return
	}
	log.Printf("%s: OnStoppedLeading unprompted: lost", el.identity)
	c.out.send(map[string]interface{}{
		"event":   "session-lost",
		"session": 0,
		"reason":  fmt.Sprintf("OnStoppedLeading (%s)", el.identity),
	})
}

// release cancels the elector's context: with ReleaseOnCancel client-go clears the
// holder in the Lease, then Run returns. We wait for that, bounded. (After a step-down
// Run has already returned: nothing is left to do.)
func (c *client) release() error {
	if c.el == nil {
		return errors.New("release without a lock held")
	}
	return c.stopElector()
}

func (c *client) stopElector() error {
	el := c.el
	c.el = nil
	atomic.StoreInt32(&el.stopping, 1)
	el.cancel()
	select {
	case <-el.done:
		return nil
	case <-time.After(opTimeout):
		return fmt.Errorf("%s: the elector did not return within %s of its cancel", el.identity, opTimeout)
	}
}

// stop ends a running elector (released as on release) and forgets the client.
func (c *client) stop() {
	if c.el != nil {
		if err := c.stopElector(); err != nil {
			log.Print(err)
		}
	}
	c.leases = nil
}

func (c *client) close() error {
	c.stop()
	return nil
}

func (c *client) shutdown() { c.stop() }
