#!/bin/bash
#
# devstack/plugin.sh: nova-imgtype in devstack.
#
#   [[local|localrc]]
#   enable_plugin nova-imgtype https://opendev.org/x/nova-imgtype
#
# and the NOVA_IMGTYPE_* variables of devstack/settings (each has a
# default). What each phase of devstack's plugin contract does here:
#
#   stack install      install nova-imgtype next to Nova (nodes running a
#                      Nova service)
#   stack post-config  nova.conf: the compute driver and its options on
#                      computes (n-cpu), the request filters and the
#                      image type toggle on the scheduler (n-sch)
#   stack test-config  tempest.conf: the options of the plugin's scenarios
#                      (the node running tempest)
#   unstack            nothing: nova-imgtype runs inside nova-compute and
#                      nova-scheduler, which devstack stops; storage pools
#                      and disks stay for the next stack.sh
#   clean              libvirt forgets the dir storage pools nova-compute
#                      defined (no file is touched)
#
# nova-api needs no setting: it finds the imgtype:* flavor extra spec
# validator through the package's entry point once it is installed.

# Save trace setting
_XTRACE_NOVA_IMGTYPE=$(set +o | grep xtrace)
set -o xtrace

# Formats the scenarios make from the qcow2 image with qemu-img convert;
# another unsupported_disk_format needs a file (see
# configure_tempest_for_nova_imgtype).
NOVA_IMGTYPE_QEMU_IMG_FORMATS=" raw vhd vhdx vmdk vdi "
# The storage pools nova-compute defines (nova_imgtype.virt.libvirt
# pool_specs).
NOVA_IMGTYPE_POOL_NAMES='^nova-(base-images-pool|disks-pool(-[a-z]+)?)$'

function install_nova_imgtype {
    # Installed with pip_install, devstack's pip (its venv, its upper
    # constraints), not as an editable (-e) install (setup_develop,
    # setup_dev_lib) nor with setup_install:
    # - the package ships the driver shim nova/virt/imgtype
    #   (compute_driver = imgtype.LibvirtDriver), which only works inside
    #   Nova's own nova/virt package. devstack installs Nova from git as
    #   an editable install (setup_develop), found through setuptools'
    #   import hook; a nova/ directory without __init__.py on the path
    #   (the shim's, in site-packages or in an editable nova-imgtype)
    #   comes first and turns "nova" into a namespace package without
    #   Nova in it. So pip installs the package without its nova/
    #   directory (from a copy of the tree), and
    #   _nova_imgtype_place_shim puts the shim into Nova's tree;
    # - --no-deps, which setup_install cannot pass: devstack has
    #   installed Nova (from git: a development version our range,
    #   nova>=33.0.0,<35, may not cover) and what it needs (everything
    #   requirements.txt lists); pip must not pull a released Nova from
    #   PyPI next to it.
    local src
    src=$(mktemp -d -t nova-imgtype.XXXXXXXXXX)
    cp -r "$NOVA_IMGTYPE_DIR/nova_imgtype" "$NOVA_IMGTYPE_DIR/pyproject.toml" \
        "$NOVA_IMGTYPE_DIR/setup.cfg" "$NOVA_IMGTYPE_DIR/requirements.txt" \
        "$NOVA_IMGTYPE_DIR/README.rst" "$src/"
    pip_install --no-deps "$src" || \
        die $LINENO "nova-imgtype: pip install of $NOVA_IMGTYPE_DIR failed"
    # Our own temporary copy (mktemp's), nothing else.
    rm -r -- "$src"
    _nova_imgtype_place_shim
}

# The shim, nova/virt/imgtype/__init__.py, goes into the nova/virt package
# of Nova's git tree, where Nova's editable install finds it.
function _nova_imgtype_place_shim {
    local python=${PYTHON:-python3}
    local virt
    virt=$($python -c 'import os, nova.virt; print(os.path.dirname(nova.virt.__file__))') || \
        die $LINENO "nova-imgtype: Nova cannot be imported with $python (is a nova/ directory without __init__.py, left on the Python path by an older install of nova-imgtype, hiding it?)"
    if [[ "$virt" != "$NOVA_DIR/nova/virt" ]]; then
        die $LINENO "nova-imgtype: Nova is imported from $virt, not from devstack's $NOVA_DIR"
    fi
    mkdir -p "$virt/imgtype"
    cp "$NOVA_IMGTYPE_DIR/nova/virt/imgtype/__init__.py" "$virt/imgtype/__init__.py"
    $python -c 'import nova.virt.driver, nova.virt.imgtype, nova_imgtype.scheduler.filters' || \
        die $LINENO "nova-imgtype: compute_driver imgtype.LibvirtDriver (nova.virt.imgtype) cannot be imported"
}

# nova.conf. Compute options go to $NOVA_CONF too, not $NOVA_CPU_CONF:
# devstack's start_nova_compute, after this phase, makes $NOVA_CPU_CONF a
# copy of $NOVA_CONF (then merges local.conf's [[post-config|$NOVA_CPU_CONF]]
# into it), so anything written to $NOVA_CPU_CONF now would be lost.
# nova-scheduler reads $NOVA_CONF.
function configure_nova_imgtype {
    if is_service_enabled n-cpu; then
        if [[ "$VIRT_DRIVER" != "libvirt" ]]; then
            die $LINENO "nova-imgtype: needs VIRT_DRIVER=libvirt, not $VIRT_DRIVER"
        fi
        iniset $NOVA_CONF DEFAULT compute_driver imgtype.LibvirtDriver
        iniset $NOVA_CONF libvirt use_storage_pools "$NOVA_IMGTYPE_USE_STORAGE_POOLS"
        if [[ -n "$NOVA_IMGTYPE_IMAGES_TYPE_MAPPING" ]]; then
            iniset $NOVA_CONF libvirt images_type_mapping "$NOVA_IMGTYPE_IMAGES_TYPE_MAPPING"
        fi
    fi
    if is_service_enabled n-sch; then
        iniset $NOVA_CONF scheduler filter_hosts_by_image_type_support "$NOVA_IMGTYPE_FILTER_BY_IMAGE_TYPE"
        _nova_imgtype_add_filters
    fi
}

# [filter_scheduler]available_filters is a MultiStrOpt: one line per value.
# Nova's default (nova.scheduler.filters.all_filters) applies only while
# the option is absent, so it is written first when it is; ours is added
# once (iniadd keeps the lines already there).
function _nova_imgtype_add_filters {
    local current
    current=" $(iniget_multiline $NOVA_CONF filter_scheduler available_filters) "
    if [[ "$current" == "  " ]]; then
        iniadd $NOVA_CONF filter_scheduler available_filters nova.scheduler.filters.all_filters
    fi
    if [[ "$current" != *" nova_imgtype.scheduler.filters.all_filters "* ]]; then
        iniadd $NOVA_CONF filter_scheduler available_filters nova_imgtype.scheduler.filters.all_filters
    fi
}

# tempest.conf, once devstack has written it (extras.d/80-tempest.sh runs
# configure_tempest in this phase before the plugins).
function configure_tempest_for_nova_imgtype {
    local fmt=$NOVA_IMGTYPE_TEMPEST_UNSUPPORTED_DISK_FORMAT
    iniset $TEMPEST_CONFIG imgtype-feature-enabled image_type_scheduling "$NOVA_IMGTYPE_FILTER_BY_IMAGE_TYPE"
    iniset $TEMPEST_CONFIG imgtype unsupported_disk_format "$fmt"
    if [[ "$NOVA_IMGTYPE_QEMU_IMG_FORMATS" != *" $fmt "* ]]; then
        # qemu-img writes no such image (ploop): a file Glance takes as
        # that format (zeroes pass its format check); no compute boots it,
        # which is the point. Next to devstack's images, which tempest
        # reads ([scenario]img_file).
        local image
        image=$(_nova_imgtype_unsupported_image)
        truncate -s 1M "$image"
        chmod 0644 "$image"
        iniset $TEMPEST_CONFIG imgtype unsupported_image_file "$image"
    fi
}

function _nova_imgtype_unsupported_image {
    echo "${FILES:-$TOP_DIR/files}/nova-imgtype-unsupported.$NOVA_IMGTYPE_TEMPEST_UNSUPPORTED_DISK_FORMAT"
}

# After unstack.sh, before devstack's own cleanup_nova (which removes the
# instances directory, the dir pools' targets). Undefining a dir pool
# (after stopping it, which only deactivates it) removes libvirt's
# definition and touches no file; without it the next nova-compute would
# find pools over removed directories. Logical and rbd pools name a
# volume group or a Ceph pool that may hold more than devstack's data:
# they are left to the operator.
function cleanup_nova_imgtype {
    if is_service_enabled n-cpu && command -v virsh >/dev/null; then
        local pool
        for pool in $(sudo virsh pool-list --all --name 2>/dev/null); do
            [[ $pool =~ $NOVA_IMGTYPE_POOL_NAMES ]] || continue
            if sudo virsh pool-dumpxml "$pool" | grep -q "<pool type='dir'"; then
                sudo virsh pool-destroy "$pool" || true
                sudo virsh pool-undefine "$pool" || true
            else
                echo "nova-imgtype: storage pool $pool is not a dir pool: left defined (virsh pool-undefine $pool forgets it)"
            fi
        done
    fi
    rm -f -- "$(_nova_imgtype_unsupported_image)"
}

if [[ "$1" == "stack" && "$2" == "install" ]]; then
    if is_service_enabled nova; then
        echo_summary "Installing nova-imgtype"
        install_nova_imgtype
    fi
elif [[ "$1" == "stack" && "$2" == "post-config" ]]; then
    if is_service_enabled nova; then
        echo_summary "Configuring Nova for nova-imgtype"
        configure_nova_imgtype
    fi
elif [[ "$1" == "stack" && "$2" == "test-config" ]]; then
    if is_service_enabled tempest; then
        echo_summary "Configuring tempest for nova-imgtype"
        configure_tempest_for_nova_imgtype
    fi
fi

if [[ "$1" == "unstack" ]]; then
    # Nothing of ours runs outside nova-compute and nova-scheduler.
    :
fi

if [[ "$1" == "clean" ]]; then
    cleanup_nova_imgtype
fi

# Restore xtrace
$_XTRACE_NOVA_IMGTYPE
