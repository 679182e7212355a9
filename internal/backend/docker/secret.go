package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandgate/sandgate/internal/backend"
)

// The secret of a sandbox running Sandgate's own server (an image with
// LabelServer) is copied into its created, not yet started container as
// secretPath, owned by the sandbox's user and readable by it alone; the
// server reads and removes it before it serves anything (--secret-file), so
// no command in the container ever finds it. It is also kept in the
// labelSecret label, so that Discover and List (a gateway that lost its
// Redis) can reach the sandbox again: labels are visible to engine users
// only, who are root on this host anyway. The label is taken out of
// Info.Labels, and neither is ever logged.
const (
	secretDir   = "/.sandgate"
	secretPath  = secretDir + "/secret"
	labelSecret = "sandgate.secret"
)

// deliverSecret copies cs's secret file into container id (created from
// cs, not started).
func (d *Docker) deliverSecret(ctx context.Context, id string, cs containerSpec) error {
	uid, gid, known, err := d.secretOwner(ctx, cs.Config.Image, cs.User)
	if err != nil {
		return err
	}
	archive, err := secretArchive(cs.Secret, uid, gid, known)
	if err != nil {
		return err
	}
	if err := d.api.CopyToContainer(ctx, id, "/", archive, container.CopyToContainerOptions{}); err != nil {
		return engineErr("copy the sandbox secret into its container", err)
	}
	return nil
}

// secretOwner is the numeric uid:gid the sandbox server runs as, when it
// can be known without the image's /etc/passwd: the sandbox's user, else
// the USER of image ref ("" = root). A name is resolved only inside the image.
func (d *Docker) secretOwner(ctx context.Context, ref string, user sandboxUser) (uid, gid int, known bool, err error) {
	if user.user != "" {
		return user.uid, user.gid, user.known, nil
	}
	img, err := d.api.ImageInspect(ctx, ref)
	if err != nil {
		return 0, 0, false, engineErr("image "+ref, err)
	}
	if img.Config == nil || img.Config.User == "" {
		return 0, 0, true, nil
	}
	uid, gid, known = numericUser(img.Config.User)
	return uid, gid, known, nil
}

// secretArchive is the tar CopyToContainer extracts at "/": the directory
// (which the server must be able to remove the file from) and the file.
// For a user known only by name the directory is writable and the file
// readable by every user of the container; that is safe because nothing but
// the init and the server runs in it before the server removes the file.
func secretArchive(secret string, uid, gid int, known bool) (*bytes.Buffer, error) {
	dirMode, fileMode := int64(0o700), int64(0o400)
	if !known {
		uid, gid, dirMode, fileMode = 0, 0, 0o777, 0o444
	}
	now := time.Now()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(secretDir, "/") + "/",
		Mode: dirMode, Uid: uid, Gid: gid, ModTime: now})
	if err == nil {
		err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(secretPath, "/"),
			Mode: fileMode, Uid: uid, Gid: gid, Size: int64(len(secret)), ModTime: now})
	}
	if err == nil {
		_, err = tw.Write([]byte(secret))
	}
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox secret archive: %w", err)
	}
	return &buf, nil
}

// splitSecret returns a container's secret label and its labels without it.
func splitSecret(labels map[string]string) (string, map[string]string) {
	secret, ok := labels[labelSecret]
	if !ok {
		return "", labels
	}
	rest := maps.Clone(labels)
	delete(rest, labelSecret)
	return secret, rest
}

// withSecret is the Info of a container with its secret label moved into
// Info.Secret.
func withSecret(info backend.Info) backend.Info {
	info.Secret, info.Labels = splitSecret(info.Labels)
	return info
}
