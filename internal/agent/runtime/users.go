package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Default range of the users workloads run as: far above the ids
// distributions hand out to people and system services.
const (
	DefaultFirstUID = 2_000_000_000
	DefaultUIDCount = 65_536
)

// Users hands out the unprivileged users workloads run as: one per attempt
// on the node, never two attempts at once. The ids need no entry in
// /etc/passwd; each is its own group. Several agents on one machine (a
// server's local and simulated nodes, a `gpufleet agent` beside it) share
// the range safely: a uid in use is claimed machine-wide by a file in the
// claim folder, created exclusively and naming its owner. Users is safe
// for concurrent use.
type Users struct {
	first, count int
	// claims is the machine-wide claim folder; owner names this allocator
	// in its claims.
	claims, owner string

	mu    sync.Mutex
	held  map[string]*holding // by attempt id
	byUID map[int]string      // attempt id holding a uid
	// kept are the uids of an earlier run still claimed because they are
	// in use (NewUsers): handed out by Hold alone, to the replica adopted
	// with them.
	kept    map[int]bool
	nextUID int // where the search for a free id starts
}

type holding struct {
	user User
	refs int
}

// DefaultClaimDir is the machine-wide folder of uid claims.
const DefaultClaimDir = "/var/lib/gpufleet/uids"

// NewUsers returns an allocator over uids [first, first+count) that claims
// them in claimDir as owner. It drops the claims owner left from an
// earlier run, except those of uids in inUse (the caller's record of what
// its earlier run has not released: the owners of replicas' folders) and
// of uids that still have processes. A replica that ran on, or ended,
// while its agent restarted thus keeps its uid claimed machine-wide until
// it is adopted again (Hold), rather than leaving it for another agent on
// the machine to hand to a second tenant, who could read what it left and
// whose end would reclaim the uid, killing the replica (KillUser). A kept
// uid that no adopted replica takes back stays claimed until the next start.
func NewUsers(first, count int, claimDir, owner string, inUse map[int]bool) (*Users, error) {
	// The parent (/var/lib/gpufleet) also holds the work root, which
	// workload users must pass through: a parent MkdirAll made would be
	// 0700, so make it 0711 first; the claims themselves stay private.
	if err := os.MkdirAll(filepath.Dir(claimDir), 0o711); err != nil {
		return nil, fmt.Errorf("creating the uid claim folder: %w", err)
	}
	if err := os.Mkdir(claimDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("creating the uid claim folder: %w", err)
	}
	entries, err := os.ReadDir(claimDir)
	if err != nil {
		return nil, fmt.Errorf("reading the uid claim folder: %w", err)
	}
	live, err := liveUIDs()
	if err != nil {
		return nil, fmt.Errorf("looking for the processes of earlier claims: %w", err)
	}
	kept := map[int]bool{}
	for _, e := range entries {
		p := filepath.Join(claimDir, e.Name())
		data, err := os.ReadFile(p)
		if err != nil || string(data) != owner {
			continue
		}
		if uid, err := strconv.Atoi(e.Name()); err == nil && (live[uid] || inUse[uid]) {
			kept[uid] = true
			continue
		}
		os.Remove(p)
	}
	return &Users{first: first, count: count, claims: claimDir, owner: owner, held: map[string]*holding{}, byUID: map[int]string{}, kept: kept, nextUID: first}, nil
}

// claim takes uid machine-wide; false when another owner holds it.
func (u *Users) claim(uid int) (bool, error) {
	p := filepath.Join(u.claims, strconv.Itoa(uid))
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		data, rerr := os.ReadFile(p)
		return rerr == nil && string(data) == u.owner, nil
	}
	if err != nil {
		return false, fmt.Errorf("claiming uid %d: %w", uid, err)
	}
	_, werr := f.WriteString(u.owner)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(p)
		return false, fmt.Errorf("claiming uid %d: %w", uid, werr)
	}
	return true, nil
}

func (u *Users) unclaim(uid int) { os.Remove(filepath.Join(u.claims, strconv.Itoa(uid))) }

// Acquire returns the user of attempt, handing out a free one when the
// attempt holds none yet. Every Acquire is matched by one Put.
func (u *Users) Acquire(attempt string) (User, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if h := u.held[attempt]; h != nil {
		h.refs++
		return h.user, nil
	}
	for i := range u.count {
		uid := u.first + (u.nextUID-u.first+i)%u.count
		if _, busy := u.byUID[uid]; busy || u.kept[uid] {
			continue
		}
		if ok, err := u.claim(uid); err != nil {
			return User{}, err
		} else if !ok {
			continue // another agent on this machine holds it
		}
		u.nextUID = uid + 1
		h := &holding{user: User{UID: uid, GID: uid}, refs: 1}
		u.held[attempt], u.byUID[uid] = h, attempt
		return h.user, nil
	}
	return User{}, fmt.Errorf("all %d workload users are in use", u.count)
}

// Hold records that attempt holds user (a replica adopted after a
// restart). It fails when another attempt holds that user.
func (u *Users) Hold(attempt string, user User) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if other, busy := u.byUID[user.UID]; busy && other != attempt {
		return fmt.Errorf("uid %d is held by attempt %s", user.UID, other)
	}
	if ok, err := u.claim(user.UID); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("uid %d is claimed by another agent on this machine", user.UID)
	}
	if h := u.held[attempt]; h != nil {
		if h.user != user {
			return fmt.Errorf("attempt %s holds uid %d, not %d", attempt, h.user.UID, user.UID)
		}
		h.refs++
		return nil
	}
	u.held[attempt], u.byUID[user.UID] = &holding{user: user, refs: 1}, attempt
	delete(u.kept, user.UID)
	return nil
}

// Put gives back one reference of attempt's user and reports whether it
// was the last: then the caller must Reclaim the user before the next
// Acquire can hand it out, which Release does once reclaimed.
func (u *Users) Put(attempt string) (last bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	h := u.held[attempt]
	if h == nil {
		return false
	}
	h.refs--
	return h.refs <= 0
}

// Release frees attempt's user for others; call it after Reclaim.
func (u *Users) Release(attempt string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if h := u.held[attempt]; h != nil && h.refs <= 0 {
		delete(u.byUID, h.user.UID)
		delete(u.held, attempt)
		u.unclaim(h.user.UID)
	}
}

// Reclaim takes back everything user may still hold before the user is
// handed to another attempt: it kills every process of the uid (a workload
// may have left some outside its group) and gives the folders in owned to
// the agent again (mode 0700), so the next holder of the uid reads none of
// them.
func Reclaim(user User, owned ...string) error {
	var errs []error
	if err := KillUser(user.UID, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	for _, dir := range owned {
		if dir == "" {
			continue
		}
		if err := chownTree(dir, os.Getuid(), os.Getgid()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// KillUser sends SIGKILL to every process whose real or effective uid is
// uid, until none is left or wait passes.
func KillUser(uid int, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		pids, err := ProcessesOf(uid)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of uid %d survive SIGKILL", pids, uid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ProcessesOf lists the live processes of uid (zombies excluded).
func ProcessesOf(uid int) ([]int, error) {
	var pids []int
	err := eachProcess(func(pid int, uids []int) {
		if slices.Contains(uids, uid) {
			pids = append(pids, pid)
		}
	})
	return pids, err
}

// liveUIDs is the set of uids, real or effective, of the live processes.
func liveUIDs() (map[int]bool, error) {
	live := map[int]bool{}
	err := eachProcess(func(_ int, uids []int) {
		for _, u := range uids {
			live[u] = true
		}
	})
	return live, err
}

// eachProcess calls fn with every live process (zombies excluded) and its
// real and effective uids.
func eachProcess(fn func(pid int, uids []int)) error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("listing processes: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := os.Open("/proc/" + e.Name() + "/status")
		if err != nil {
			continue // gone meanwhile
		}
		var state string
		var uids []int
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "State:"):
				state = strings.TrimSpace(strings.TrimPrefix(line, "State:"))
			case strings.HasPrefix(line, "Uid:"):
				f := strings.Fields(line)
				for _, s := range f[1:min(len(f), 3)] { // real, effective
					if u, err := strconv.Atoi(s); err == nil {
						uids = append(uids, u)
					}
				}
			}
		}
		f.Close()
		if !strings.HasPrefix(state, "Z") && !strings.HasPrefix(state, "X") {
			fn(pid, uids)
		}
	}
	return nil
}

// chownTree gives dir and everything in it to uid:gid without following
// links, and closes dir itself to others (0700).
func chownTree(dir string, uid, gid int) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("handing %s to uid %d: %w", dir, uid, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("closing %s: %w", dir, err)
	}
	return nil
}

// Own hands dir and everything in it to user (mode 0700 on dir), for the
// workload to write.
func Own(dir string, user User) error { return chownTree(dir, user.UID, user.GID) }
