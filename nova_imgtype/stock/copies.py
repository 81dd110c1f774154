"""Stock steps the plugin takes its own way, each pinned to stock's source.

Where one of stock's steps costs more than the disk it makes (a ``fork()``
of nova-compute per command, a ``qemu-img info`` process per size or
format it needs: ``benchmarks/profile.py`` measures them), the plugin does
the same step in its own code, in stock's order and with stock's checks
(Nova's format inspector's safety check of a template, the flavor's size
check, the template's lock). Each such copy is listed here with the stock
function it follows and the sha256 of that function's source in every
Nova release it was checked against (Nova 33.0.2 and 34.0.0: the same).
When the installed source differs (a stock fix, a security fix included),
``tests/unit/test_stock_facts.py`` and ``nova-imgtype-status upgrade
check`` fail, naming the copy to review against stock's change.
"""

from __future__ import annotations

from nova_imgtype.stock.facts import CopiedSource

FACTS = (
    CopiedSource(
        'nova.virt.libvirt.imagebackend:Qcow2.create_image',
        frozenset({'42542556a47b790157284f80096166fd'
                   'cefdb4ded7c380bb2f2b4842d0493913'}),
        'nova_imgtype.virt.libvirt.qcow2:Qcow2._overlay_on',
        "an overlay on a cached template, made with stock's safety check, "
        "size check and lock, its backing format and cluster size read by "
        "Nova's format inspector instead of qemu-img info"),
    CopiedSource(
        'nova.virt.libvirt.utils:create_image',
        frozenset({'b756625419eb793c20ec5c73cee6ad96'
                   '656d76c7ae659dad07bc4ae7c5a07f90'}),
        'nova_imgtype.virt.libvirt.qcow2:Qcow2._create_overlay',
        "stock's qemu-img create command of an overlay (backing file and "
        "format, cluster size), run without forking nova-compute"),
    CopiedSource(
        'nova.virt.libvirt.imagebackend:Flat.create_image',
        frozenset({'c367ed2939552ec22023d2ccd751fd6d'
                   'c537728dc4128cfec01cd47744e9a1a6'}),
        'nova_imgtype.virt.libvirt.flat:Flat._copy_template',
        "a Flat disk copied from its template after stock's size check, "
        "under the template's lock"),
    CopiedSource(
        'nova.virt.libvirt.utils:copy_image',
        frozenset({'594331ed5e7d7f794a940ce335832f0e'
                   '08b3439965eb9ffa6d36fd9b72272e98'}),
        'nova_imgtype.virt.libvirt.flat:Flat._copy_template',
        "stock's local copy (cp -r, sparse), run without forking "
        "nova-compute"),
    CopiedSource(
        'nova.virt.libvirt.imagebackend:Flat._get_driver_format',
        frozenset({'f1516c71d2bbe6d5376dec3e5adc242b'
                   'b19bad7388b4cf2e2e482a4209c7e9ec'}),
        'nova_imgtype.virt.libvirt.sizes:disk_format',
        "a Flat disk's format (raw or qcow2) read by Nova's format "
        "inspector instead of a qemu-img info process"),
    CopiedSource(
        'nova.virt.images:get_image_format',
        frozenset({'6ff924487ca4c4812c3238b95d79ef02'
                   'b017d3177d7d2124a42046aafe507403'}),
        'nova_imgtype.virt.libvirt.sizes:checked_template',
        "stock's safety check of a template (the inspector it gets), made "
        "once per version of the template file"),
    CopiedSource(
        'oslo_concurrency.processutils:execute',
        frozenset({'64d1d6114b0641f653bb3dbedd166b25'
                   'c87d7bab6875633c2633c444729de8e4'}),
        'nova_imgtype.virt.libvirt.spawn:execute',
        "processutils' run of a command (its log lines, its "
        "ProcessExecutionError), without the preexec_fn that makes "
        "CPython fork nova-compute"),
)
