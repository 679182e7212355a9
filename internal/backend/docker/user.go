package docker

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/jail"
)

// sandboxUser is who one sandbox's container runs as, and what its
// thread's writable dirs need so that this user works in them and no other
// host user looks in.
type sandboxUser struct {
	// user is the container's User; "" = the image's USER.
	user string
	// uid and gid are the numeric ids of user; known is false for a name
	// or the image's USER (resolved inside the image only).
	uid, gid int
	known    bool
	// own: the thread dirs are chowned to uid:gid (the gateway is root).
	own bool
	// dirMode is the thread dirs' mode; 0 = left as they are.
	dirMode os.FileMode
	// umask, when set, is passed to our server (--umask); else its default
	// (sandbox.DefaultUmask, 077) applies.
	umask string
}

// resolveUser turns Config.User into sandbox sid's user, for a gateway
// running as euid:egid.
//
//   - "": the sandbox's own host uid (jail.SandboxHostID), never the
//     gateway's. A root gateway runs it as id:id and hands it the thread
//     dirs (0700). An unprivileged gateway cannot chown: the sandbox runs
//     as id:{gateway gid}, the dirs are 2770 with the gateway's group, and
//     the server's umask is 007, so the gateway (and the thread's next
//     sandbox, the same uid anyway) reads what it wrote and others nothing.
//   - UserImage: the image's USER; the dirs are left as they are.
//   - "uid:gid" (numeric): run as that; a root gateway hands it the dirs.
//   - anything else (a name): run as that; the dirs are the operator's.
func resolveUser(cfgUser, sid string, euid, egid int) sandboxUser {
	switch cfgUser {
	case "":
		id := jail.SandboxHostID(sid)
		if euid == 0 {
			return sandboxUser{user: ids(id, id), uid: id, gid: id, known: true, own: true, dirMode: 0o700}
		}
		return sandboxUser{user: ids(id, egid), uid: id, gid: egid, known: true,
			dirMode: os.ModeSetgid | 0o770, umask: "007"}
	case UserImage:
		return sandboxUser{}
	}
	u := sandboxUser{user: cfgUser}
	u.uid, u.gid, u.known = numericUser(cfgUser)
	if u.known && euid == 0 && strings.Contains(cfgUser, ":") {
		u.own, u.dirMode = true, 0o700
	}
	return u
}

func ids(uid, gid int) string { return strconv.Itoa(uid) + ":" + strconv.Itoa(gid) }

// numericUser parses "uid[:gid]" (gid 0 when absent, as the engine does for
// a uid the image's passwd lacks); false for a name.
func numericUser(user string) (uid, gid int, ok bool) {
	u, g, _ := strings.Cut(user, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if g == "" {
		gid, err2 = 0, nil
	}
	if err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return 0, 0, false
	}
	return uid, gid, true
}

// rootUser reports a configured user that is root: allowed (an image may
// need it with docker_cap_add), but worth a warning.
func rootUser(cfgUser string) bool {
	name, _, _ := strings.Cut(cfgUser, ":")
	return name == "root" || name == "0"
}

// prepareDirs hands the thread's writable dirs (backend.SandboxOwned) to
// the sandbox's user: owner (a root gateway, jail.Own walks a thread's
// files once, when its uid changes) or group, then the mode. The read-only
// skills and ACP dirs, and configured mounts, keep theirs.
func (u sandboxUser) prepareDirs(mounts []backend.Mount) error {
	if u.dirMode == 0 {
		return nil
	}
	for _, m := range mounts {
		if !backend.SandboxOwned(m) {
			continue
		}
		var err error
		if u.own {
			err = jail.Own(m.HostPath, u.uid, u.gid)
		} else {
			err = os.Lchown(m.HostPath, -1, u.gid)
		}
		if err == nil {
			err = backend.ChmodDir(m.HostPath, u.dirMode)
		}
		if err != nil {
			return fmt.Errorf("%w: give %s to the sandbox's user %s: %w", backend.ErrHostDirs, m.ContainerPath, u.user, err)
		}
	}
	return nil
}
