#!/bin/bash
#
# devstack/plugin.sh: install nova-imgtype into devstack's Python
# environment, on every node that enables the plugin.
#
#   [[local|localrc]]
#   enable_plugin nova-imgtype https://opendev.org/x/nova-imgtype
#
# Configuration is left to local.conf post-config sections (see .zuul.yaml):
# compute_driver = imgtype.LibvirtDriver and [libvirt]images_type_mapping
# in $NOVA_CPU_CONF, [scheduler]filter_hosts_by_image_type_support and
# [filter_scheduler]available_filters in $NOVA_CONF.

# Save trace setting
_XTRACE_NOVA_IMGTYPE=$(set +o | grep xtrace)
set -o xtrace

function install_nova_imgtype {
    # Not editable (-e): the package ships the driver shim
    # nova/virt/imgtype, which only works installed next to Nova's modules.
    # --no-deps: devstack installs Nova and what it needs from git (a
    # development version our requirements' range, nova>=33.0.0,<35, may
    # not cover) and its own constraints; pip must not pull released
    # versions from PyPI next to them. The trailing
    # option keeps pip_install, which looks at its last argument, from also
    # installing our test-requirements.txt.
    pip_install --no-deps "$NOVA_IMGTYPE_DIR" --no-compile
    _nova_imgtype_place_shim
}

# Nova from git is an editable install, found through setuptools' import
# hook. A nova/ directory without __init__.py in site-packages (ours, only
# holding virt/imgtype) comes first and turns "nova" into a namespace
# package without Nova in it. Move the shim into Nova's tree instead.
function _nova_imgtype_place_shim {
    local python=${PYTHON:-python3}
    local site
    site=$($python -c 'import os, nova_imgtype; print(os.path.dirname(os.path.dirname(nova_imgtype.__file__)))')
    if [[ -d $NOVA_DIR/nova/virt && -d $site/nova && ! -e $site/nova/__init__.py ]]; then
        sudo rm -rf "$site/nova"
        cp -r "$NOVA_IMGTYPE_DIR/nova/virt/imgtype" "$NOVA_DIR/nova/virt/"
    fi
    $python -c 'import nova.virt.driver, nova.virt.imgtype' || \
        die $LINENO "nova-imgtype: compute_driver imgtype.LibvirtDriver (nova.virt.imgtype) cannot be imported"
}

if [[ "$1" == "stack" && "$2" == "install" ]]; then
    echo_summary "Installing nova-imgtype"
    install_nova_imgtype
fi

# Restore xtrace
$_XTRACE_NOVA_IMGTYPE
