"""A real image endpoint for the benchmarks: glance-api on loopback.

Glance's own API (``glance.wsgi.api:application`` under uwsgi, as the
gate and devstack run it) with the file store and a SQLite database, its
paste pipeline without keystone (``unauthenticated-context``: every request
is an admin's). Images are uploaded through its API, so Glance computes
their ``os_hash_value`` as it does in a cloud; Nova then downloads them
through its own image API and glanceclient over HTTP, which checks that
hash as it reads (``[glance]endpoint_override`` names the endpoint; a
request context needs a token, which nothing checks here).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

ADDRESS = '127.0.0.51'
PORT = 19292
#: Glance's policy rules the benchmarks need, open to all.
POLICY_OPEN = ('add_image', 'upload_image', 'get_image', 'get_images',
               'download_image', 'delete_image', 'modify_image')
UWSGI = ('--master', '--processes', '1', '--threads', '4',
         '--enable-threads', '--die-on-term', '--lazy-apps', '--need-app',
         '--buffer-size', '65535', '--http-keepalive', '--no-orphans',
         '--chunked-input-limit', '4096000', '--http-auto-chunked',
         '--http-raw-body', '--wsgi-disable-file-wrapper',
         # As the gate's services: a client's kept-alive connection is not
         # found closed at its next request.
         '--add-header', 'Connection: close')


class GlanceEndpoint:
    """glance-api serving from ``work``; :meth:`start`, then images."""

    def __init__(self, work: str) -> None:
        self.work = os.path.join(work, 'glance')
        self.url = 'http://%s:%d' % (ADDRESS, PORT)
        self.proc: subprocess.Popen[bytes] | None = None

    def _conf(self) -> str:
        g = self.work
        conf = {
            'DEFAULT': {'enabled_backends': 'fs:file', 'bind_host': ADDRESS,
                        'bind_port': str(PORT), 'workers': '1',
                        'image_size_cap': str(16 * 1024 ** 3),
                        'use_stderr': 'True'},
            'database': {'connection': 'sqlite:///%s/glance.sqlite' % g},
            'glance_store': {'default_backend': 'fs'},
            'fs': {'filesystem_store_datadir': g + '/images'},
            'os_glance_staging_store': {
                'filesystem_store_datadir': g + '/staging'},
            'os_glance_tasks_store': {
                'filesystem_store_datadir': g + '/tasks'},
            'paste_deploy': {'flavor': ''},
            # No keystone, so no project or role: the image calls the
            # benchmarks make are open to the unauthenticated context.
            'oslo_policy': {'policy_file': g + '/policy.yaml'},
            'oslo_concurrency': {'lock_path': g + '/locks'},
        }
        return ''.join('[%s]\n%s\n' % (section, ''.join(
            '%s = %s\n' % kv for kv in opts.items()))
            for section, opts in conf.items())

    def start(self, timeout: float = 120.0) -> None:
        """Glance's database made, glance-api answering.

        :raises RuntimeError: it did not start (its log is in the work
            directory, its tail in the message).
        """
        for sub in ('images', 'staging', 'tasks', 'locks'):
            os.makedirs(os.path.join(self.work, sub), exist_ok=True)
        conf = os.path.join(self.work, 'glance-api.conf')
        with open(conf, 'w') as f:
            f.write(self._conf())
        with open(os.path.join(self.work, 'policy.yaml'), 'w') as f:
            f.write(''.join('"%s": ""\n' % rule for rule in POLICY_OPEN))
        shutil.copy(os.path.join(sys.prefix, 'etc', 'glance',
                                 'glance-api-paste.ini'), self.work)
        log = os.path.join(self.work, 'glance.log')
        with open(log, 'ab') as out:
            subprocess.run([os.path.join(sys.prefix, 'bin', 'glance-manage'),
                            '--config-file', conf, 'db_sync'], check=True,
                           stdout=out, stderr=subprocess.STDOUT)
            self.proc = subprocess.Popen(
                [os.path.join(sys.prefix, 'bin', 'uwsgi'), '--http-socket',
                 '%s:%d' % (ADDRESS, PORT), *UWSGI, '--virtualenv',
                 sys.prefix, '--module', 'glance.wsgi.api:application'],
                env=dict(os.environ, OS_GLANCE_CONFIG_DIR=self.work),
                stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                with open(log, errors='replace') as f:
                    tail = f.read()[-2000:]
                raise RuntimeError('glance-api did not start:\n' + tail)
            time.sleep(0.3)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + '/versions',
                                        timeout=5) as r:
                return int(r.status) < 500
        except urllib.error.HTTPError as e:
            return e.code < 500
        except OSError:
            return False

    def _request(self, method: str, path: str, body: Any = None,
                 headers: dict[str, str] | None = None) -> Any:
        req = urllib.request.Request(self.url + path, data=body,
                                     method=method, headers=headers or {})
        with urllib.request.urlopen(req, timeout=600) as r:
            data = r.read()
        return json.loads(data) if data else None

    def upload(self, path: str, disk_format: str) -> dict[str, Any]:
        """The file ``path`` as a new image; its metadata as Glance
        records it (``os_hash_value`` included)."""
        image = self._request('POST', '/v2/images', json.dumps({
            'name': os.path.basename(path), 'disk_format': disk_format,
            'container_format': 'bare'}).encode(),
            {'Content-Type': 'application/json'})
        size = os.path.getsize(path)
        with open(path, 'rb') as f:
            self._request('PUT', '/v2/images/%s/file' % image['id'], f, {
                'Content-Type': 'application/octet-stream',
                'Content-Length': str(size)})
        meta: dict[str, Any] = self._request('GET',
                                             '/v2/images/%s' % image['id'])
        return meta

    def delete(self, image_id: str) -> None:
        self._request('DELETE', '/v2/images/%s' % image_id)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
