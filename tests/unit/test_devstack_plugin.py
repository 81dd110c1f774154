"""devstack/plugin.sh keeps devstack's plugin contract and calls only what
exists; its phases do what devstack/settings documents.

devstack's side comes from ``tests/unit/fixtures`` (the first line of each
file names the devstack commit): ``devstack-plugins.rst`` (the plugin.sh
contract: modes and phases), ``devstack-functions.txt`` (every function
devstack's ``functions``, ``functions-common``, ``inc/`` and ``lib/``
define) and ``devstack-ini-config`` (``inc/ini-config``, run for real
below, with stubs for the rest of devstack).
"""

import pathlib
import re
import shutil
import subprocess
import textwrap

import pytest
from oslo_config import cfg

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = pathlib.Path(__file__).resolve().parent / 'fixtures'
PLUGIN = ROOT / 'devstack' / 'plugin.sh'
SETTINGS = ROOT / 'devstack' / 'settings'
BASH = shutil.which('bash')

#: Commands plugin.sh may run besides bash builtins and devstack's
#: functions: coreutils/grep, and sudo/virsh as devstack's own
#: cleanup_nova runs them.
STANDARD_COMMANDS = {'chmod', 'cp', 'grep', 'mkdir', 'mktemp', 'rm',
                     'sudo', 'truncate', 'virsh'}
#: Commands named by a variable: devstack's xtrace restore idiom and the
#: Python devstack installs into ($PYTHON).
VARIABLE_COMMANDS = {'$_XTRACE_NOVA_IMGTYPE', '$python'}
#: Phases plugin.sh must handle.
REQUIRED_PHASES = {('stack', 'install'), ('stack', 'post-config'),
                   ('stack', 'test-config'), ('unstack', None),
                   ('clean', None)}

# -- a small bash reader: simple commands and the words they call -----------

_OPERATORS = ('&&', '||', ';;', ';', '|', '&', '(', ')', '\n')
_PREFIX_KEYWORDS = {'if', 'then', 'else', 'elif', 'do', 'while', 'until',
                    '!', '{', 'time'}
_CLOSING_KEYWORDS = {'fi', 'done', '}', 'esac'}
_ASSIGNMENT = re.compile(r'^[A-Za-z_]\w*(\[[^]]*\])?\+?=')
_REDIRECTION = re.compile(r'^\d*(>>?|<)(&\d+|&-)?')


class BashReader:
    """Tokens of a bash script (words and control operators), and the
    scripts of its command substitutions, each read the same way. It
    knows quotes, ``$(...)``, ``${...}``, comments and line
    continuations; ``case`` and backquotes are refused."""

    def __init__(self, text):
        self.text = text
        self.subs = []
        self.tokens, end = self._read(0, closing=None)
        assert end == len(text)

    def _read(self, i, closing):
        text = self.text
        tokens = []
        word = None     # None: between words

        def flush():
            nonlocal word
            if word is not None:
                tokens.append(('word', word))
                word = None
        while i < len(text):
            ch = text[i]
            if closing and ch == ')':
                flush()
                return tokens, i + 1
            if ch == '\\' and text[i + 1:i + 2] == '\n':
                i += 2
                continue
            if ch in ' \t':
                flush()
                i += 1
                continue
            if ch == '#' and word is None:
                while i < len(text) and text[i] != '\n':
                    i += 1
                continue
            if ch == '`':
                raise ValueError('backquotes: use $(...)')
            op = next((o for o in _OPERATORS if text.startswith(o, i)), None)
            if op and not (op == '&' and word is not None
                           and word.endswith(('>', '<'))):
                flush()
                tokens.append(('op', op))
                i += len(op)
                continue
            if word is None:
                word = ''
            if ch == "'":
                end = text.index("'", i + 1)
                word += text[i:end + 1]
                i = end + 1
            elif ch == '"':
                i = self._double_quoted(i)
                word += '"..."'
            elif ch == '$':
                i, part = self._dollar(i)
                word += part
            elif ch == '\\':
                word += text[i:i + 2]
                i += 2
            else:
                word += ch
                i += 1
        if closing:
            raise ValueError('unclosed $(')
        flush()
        return tokens, i

    def _double_quoted(self, i):
        text = self.text
        i += 1
        while text[i] != '"':
            if text[i] == '\\':
                i += 2
            elif text[i] == '$':
                i, _part = self._dollar(i)
            elif text[i] == '`':
                raise ValueError('backquotes: use $(...)')
            else:
                i += 1
        return i + 1

    def _dollar(self, i):
        text = self.text
        if text.startswith('$((', i):
            end = text.index('))', i)
            return end + 2, text[i:end + 2]
        if text.startswith('$(', i):
            tokens, end = self._read(i + 2, closing=')')
            self.subs.append(tokens)
            return end, '$(...)'
        if text.startswith('${', i):
            end = text.index('}', i)
            if '$(' in text[i:end]:
                raise ValueError('$(...) inside ${...}')
            return end + 1, text[i:end + 1]
        match = re.compile(r'\$([A-Za-z_]\w*|[0-9#?@*!$-])').match(text, i)
        if match:
            return match.end(), match.group(0)
        return i + 1, '$'


def simple_commands(tokens):
    """The simple commands of a token list, each as its words from the
    command word on; function definitions as ('function', name)."""
    commands = []
    current = None
    in_condition = in_for = after_function = skip_target = False
    for kind, text in tokens:
        if in_condition:
            if kind == 'word' and text == ']]':
                in_condition = False
            continue
        if kind == 'op':
            current = None
            in_for = after_function = skip_target = False
            continue
        if skip_target:
            skip_target = False
            continue
        if _REDIRECTION.match(text):
            skip_target = _REDIRECTION.fullmatch(text) is not None
            continue
        if current is not None:
            current.append(text)
            continue
        if in_for:
            continue
        if after_function:
            commands.append(['function', text])
            after_function = False
            current = []     # the rest ('{') is not a command
            continue
        if _ASSIGNMENT.match(text) or text in _PREFIX_KEYWORDS | (
                _CLOSING_KEYWORDS):
            continue
        if text == '[[':
            in_condition = True
            continue
        if text == 'function':
            after_function = True
            continue
        if text == 'for':
            in_for = True
            continue
        if text in ('case', 'select', 'coproc') or text.endswith('()'):
            raise ValueError('unsupported construct: %s' % text)
        current = [text]
        commands.append(current)
    return commands


def all_commands(text):
    reader = BashReader(text)
    commands = simple_commands(reader.tokens)
    for sub in reader.subs:
        commands.extend(simple_commands(sub))
    return commands


def _devstack_functions():
    lines = (FIXTURES / 'devstack-functions.txt').read_text().splitlines()
    assert lines[0].startswith('# Functions defined by devstack')
    assert re.search(r'commit [0-9a-f]{40}', lines[0])
    return {line.split()[0] for line in lines if not line.startswith('#')}


def _builtins():
    out = subprocess.run([BASH, '-c', 'compgen -b; compgen -k'],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def _called(path):
    """Command words a script calls and the functions it defines."""
    called, defined = [], set()
    for command in all_commands(path.read_text()):
        if command[0] == 'function':
            defined.add(command[1])
            continue
        called.append(command[0])
        if command[0] == 'sudo':
            called.append(command[1])
    return called, defined


# -- the reader -------------------------------------------------------------

def test_reader_finds_commands_in_every_position():
    script = textwrap.dedent('''\
        # a comment: not_a_command
        A=1 one "two three" # nor this
        function four {
            local x
            x=$(five | six --flag) || seven $LINENO "$(eight)"
            if [[ "$1" == "a" && -n "$x" ]] && nine; then
                ten >/dev/null 2>&1; fi
            for y in $(eleven); do twelve "${y:-#}" \\
                continued_arg; done
            sudo thirteen 2> /dev/null
        }
        ''')
    commands = all_commands(script)
    names = [c[0] for c in commands]
    assert ['function', 'four'] in commands
    assert set(names) - {'function'} == {
        'one', 'local', 'seven', 'nine', 'ten', 'twelve', 'sudo', 'five',
        'six', 'eight', 'eleven'}
    assert ['twelve', '"..."', 'continued_arg'] in commands
    assert ['sudo', 'thirteen'] in commands
    with pytest.raises(ValueError):
        all_commands('case $1 in a) b;; esac\n')


# -- the contract -----------------------------------------------------------

def _documented_phases():
    """(mode, phase) pairs of the plugin.sh contract in devstack's docs."""
    text = (FIXTURES / 'devstack-plugins.rst').read_text()
    assert re.search(r'commit [0-9a-f]{40}', text.splitlines()[0])
    contract = text.split('The current full list of ``mode`` and ``phase`` '
                          'are:')[1].split('Example plugin')[0]
    pairs = set()
    mode = None
    for line in contract.splitlines():
        top = re.match(r'^-  \*\*([\w-]+)\*\*', line)
        nested = re.match(r'^\s+-  \*\*([\w-]+)\*\*', line)
        if top:
            mode = top.group(1)
            pairs.add((mode, None))
        elif nested:
            pairs.add((mode, nested.group(1)))
    return pairs


def _used_phases():
    text = PLUGIN.read_text()
    conditions = re.findall(r'\[\[ ("\$1" ==[^]]*) \]\]', text)
    pairs = set()
    for condition in conditions:
        match = re.fullmatch(r'"\$1" == "([\w-]+)"(?: && "\$2" == '
                             r'"([\w-]+)")?', condition)
        assert match, condition
        pairs.add((match.group(1), match.group(2)))
    return pairs


def test_documented_phases_are_read_from_devstacks_docs():
    assert _documented_phases() == {
        ('stack', None), ('stack', 'pre-install'), ('stack', 'install'),
        ('stack', 'post-config'), ('stack', 'extra'),
        ('stack', 'test-config'), ('unstack', None), ('clean', None)}


def test_plugin_handles_the_documented_phases_only():
    used = _used_phases()
    assert used <= _documented_phases()
    assert REQUIRED_PHASES <= used


def test_plugin_is_valid_bash():
    for path in (PLUGIN, SETTINGS):
        subprocess.run([BASH, '-n', str(path)], check=True)


def test_plugin_calls_only_builtins_standard_commands_and_devstacks():
    devstack = _devstack_functions()
    builtins = _builtins()
    for path in (PLUGIN, SETTINGS):
        called, defined = _called(path)
        unknown = sorted({c for c in called
                          if c not in builtins | STANDARD_COMMANDS | defined
                          | devstack | VARIABLE_COMMANDS})
        assert not unknown, (path.name, unknown)
    called, defined = _called(PLUGIN)
    # The reader sees what the plugin is about.
    assert {'pip_install', 'iniset', 'iniadd', 'iniget_multiline', 'die',
            'is_service_enabled', 'echo_summary'} <= set(called) & devstack
    assert {'install_nova_imgtype', 'configure_nova_imgtype',
            'configure_tempest_for_nova_imgtype',
            'cleanup_nova_imgtype'} <= defined & set(called)
    assert not defined & devstack, 'plugin.sh redefines devstack functions'
    assert {'define_plugin', 'trueorfalse'} <= set(_called(SETTINGS)[0])


def test_plugin_deletes_nothing_but_its_own_files():
    """No rm under sudo, no rm -r but of the plugin's mktemp copy, nothing
    under site-packages."""
    text = PLUGIN.read_text()
    code = ''.join(line for line in text.splitlines(keepends=True)
                   if not line.lstrip().startswith('#'))
    assert 'site-packages' not in code and 'site=' not in code
    for command in all_commands(text):
        if command[0] == 'sudo':
            assert command[1] in ('virsh',), command
        if command[0] != 'rm':
            continue
        flags = [w for w in command[1:] if w.startswith('-') and w != '--']
        if any('r' in f for f in flags):
            assert command == ['rm', '-r', '--', '"..."'], command
            assert 'rm -r -- "$src"' in text
        else:
            assert flags == ['-f'], command


def test_compute_options_are_not_written_to_nova_cpu_conf():
    """start_nova_compute copies $NOVA_CONF over $NOVA_CPU_CONF after the
    post-config phase: what plugin.sh wrote there would be lost."""
    assert '$NOVA_CPU_CONF' not in ''.join(
        line for line in PLUGIN.read_text().splitlines(keepends=True)
        if not line.lstrip().startswith('#'))


# -- settings ---------------------------------------------------------------

def _settings_variables():
    return dict(re.findall(r'^(NOVA_IMGTYPE_\w+)=(.*)$',
                           SETTINGS.read_text(), re.MULTILINE))


def test_settings_define_the_plugin_and_overridable_defaults():
    text = SETTINGS.read_text()
    assert re.search(r'^define_plugin nova-imgtype$', text, re.MULTILINE)
    variables = _settings_variables()
    assert {'NOVA_IMGTYPE_DIR', 'NOVA_IMGTYPE_IMAGES_TYPE_MAPPING',
            'NOVA_IMGTYPE_USE_STORAGE_POOLS',
            'NOVA_IMGTYPE_FILTER_BY_IMAGE_TYPE',
            'NOVA_IMGTYPE_TEMPEST_UNSUPPORTED_DISK_FORMAT'} <= set(variables)
    for name, value in variables.items():
        # localrc's value wins: ${NAME:-default} or trueorfalse.
        assert (value.startswith('${%s:-' % name)
                or value == '$(trueorfalse True %s)' % name
                or value == '$(trueorfalse False %s)' % name), name


def test_plugin_reads_only_variables_settings_define():
    text = PLUGIN.read_text()
    used = set(re.findall(r'\$\{?(NOVA_IMGTYPE_\w+)', text))
    assigned = set(re.findall(r'^(NOVA_IMGTYPE_\w+)=', text, re.MULTILINE))
    assert used <= set(_settings_variables()) | assigned


def test_install_guide_shows_every_variable():
    readme = (ROOT / 'doc/source/install/index.rst').read_text()
    for name in _settings_variables():
        if name != 'NOVA_IMGTYPE_DIR':
            assert name in readme, name
    assert 'enable_plugin nova-imgtype' in readme


# -- the phases, run with devstack's inc/ini-config -------------------------

#: devstack's trueorfalse (functions-common, same commit), and stubs.
HARNESS = r'''
# As stack.sh runs plugins: errexit (devstack sets nounset only with
# NOUNSET, and its iniset_multiline reads an unset variable).
set -o errexit
source "$FIXTURES/devstack-ini-config"
function trueorfalse {
    local default=$1
    local testval=${!2:-}
    case "$testval" in
        "1" | [yY]es | "YES" | [tT]rue | "TRUE" ) echo "True" ;;
        "0" | [nN]o | "NO" | [fF]alse | "FALSE" ) echo "False" ;;
        * )                                       echo "$default" ;;
    esac
}
function define_plugin { :; }
function echo_summary { echo "summary: $*"; }
function die { echo "die: $*" >&2; exit 1; }
function is_service_enabled {
    local service
    for service in "$@"; do
        [[ ,$ENABLED_SERVICES, == *,$service,* ]] && return 0
        [[ $service == nova && ,$ENABLED_SERVICES == *,n-* ]] && return 0
    done
    return 1
}
DEST=$WORK/opt
TOP_DIR=$WORK/devstack
FILES=$WORK/files
VIRT_DRIVER=libvirt
NOVA_CONF=$WORK/nova.conf
TEMPEST_CONFIG=$WORK/tempest.conf
'''


def _run(tmp_path, script, env=None, check=True):
    """Run ``script`` after the harness; its result."""
    (tmp_path / 'files').mkdir(exist_ok=True)
    full = HARNESS + textwrap.dedent(script)
    environ = {'PATH': '/usr/bin:/bin', 'FIXTURES': str(FIXTURES),
               'WORK': str(tmp_path), 'PLUGIN': str(PLUGIN),
               'SETTINGS': str(SETTINGS), 'ROOT': str(ROOT),
               'TMPDIR': str(tmp_path)}
    environ.update(env or {})
    result = subprocess.run([BASH, '-c', full], env=environ, text=True,
                            capture_output=True)
    if check and result.returncode:
        pytest.fail('bash exited %d:\n%s' % (
            result.returncode, result.stderr[-3000:]))
    return result


def _ini(path):
    sections = {}
    cfg.ConfigParser(str(path), sections).parse()
    return sections


NOVA_CONF = '''\
[DEFAULT]
compute_driver = libvirt.LibvirtDriver

[filter_scheduler]
enabled_filters = ComputeFilter

[libvirt]
virt_type = qemu
'''


def test_post_config_writes_nova_conf(tmp_path):
    (tmp_path / 'nova.conf').write_text(NOVA_CONF)
    _run(tmp_path, '''
        ENABLED_SERVICES=n-api,n-sch,n-cpu
        NOVA_IMGTYPE_IMAGES_TYPE_MAPPING="raw:flat, qcow2:qcow2"
        source "$SETTINGS"
        source "$PLUGIN" stack post-config
        # A second stack.sh, or a rerun, adds nothing twice.
        source "$PLUGIN" stack post-config
        ''')
    conf = _ini(tmp_path / 'nova.conf')
    assert conf['DEFAULT']['compute_driver'] == ['imgtype.LibvirtDriver']
    assert conf['libvirt']['images_type_mapping'] == ['raw:flat, qcow2:qcow2']
    assert conf['libvirt']['use_storage_pools'] == ['True']
    assert conf['libvirt']['virt_type'] == ['qemu']
    assert conf['scheduler']['filter_hosts_by_image_type_support'] == [
        'True']
    assert conf['filter_scheduler']['available_filters'] == [
        'nova.scheduler.filters.all_filters',
        'nova_imgtype.scheduler.filters.all_filters']
    assert conf['filter_scheduler']['enabled_filters'] == ['ComputeFilter']


def test_post_config_keeps_available_filters_already_there(tmp_path):
    (tmp_path / 'nova.conf').write_text(NOVA_CONF.replace(
        'enabled_filters = ComputeFilter\n',
        'enabled_filters = ComputeFilter\n'
        'available_filters = my.filters.all_filters\n'))
    _run(tmp_path, '''
        ENABLED_SERVICES=n-sch
        NOVA_IMGTYPE_FILTER_BY_IMAGE_TYPE=false
        source "$SETTINGS"
        source "$PLUGIN" stack post-config
        ''')
    conf = _ini(tmp_path / 'nova.conf')
    assert conf['filter_scheduler']['available_filters'] == [
        'my.filters.all_filters',
        'nova_imgtype.scheduler.filters.all_filters']
    assert conf['scheduler']['filter_hosts_by_image_type_support'] == [
        'False']
    # Not a compute: its options are left alone.
    assert conf['DEFAULT']['compute_driver'] == ['libvirt.LibvirtDriver']


def test_post_config_on_a_compute_only_node(tmp_path):
    (tmp_path / 'nova.conf').write_text(NOVA_CONF)
    _run(tmp_path, '''
        ENABLED_SERVICES=n-cpu,placement-client
        NOVA_IMGTYPE_USE_STORAGE_POOLS=False
        source "$SETTINGS"
        source "$PLUGIN" stack post-config
        ''')
    conf = _ini(tmp_path / 'nova.conf')
    assert conf['DEFAULT']['compute_driver'] == ['imgtype.LibvirtDriver']
    assert conf['libvirt']['use_storage_pools'] == ['False']
    # Empty mapping: not written.
    assert 'images_type_mapping' not in conf['libvirt']
    assert 'scheduler' not in conf
    assert 'available_filters' not in conf['filter_scheduler']


def test_post_config_refuses_another_virt_driver(tmp_path):
    (tmp_path / 'nova.conf').write_text(NOVA_CONF)
    result = _run(tmp_path, '''
        ENABLED_SERVICES=n-cpu
        VIRT_DRIVER=fake
        source "$SETTINGS"
        source "$PLUGIN" stack post-config
        ''', check=False)
    assert result.returncode != 0
    assert 'VIRT_DRIVER=libvirt' in result.stderr


def test_test_config_writes_tempest_conf(tmp_path):
    (tmp_path / 'tempest.conf').write_text('[compute]\nimage_ref = x\n')
    _run(tmp_path, '''
        ENABLED_SERVICES=n-api,tempest
        source "$SETTINGS"
        source "$PLUGIN" stack test-config
        ''')
    conf = _ini(tmp_path / 'tempest.conf')
    assert conf['imgtype-feature-enabled']['image_type_scheduling'] == [
        'True']
    assert conf['imgtype']['unsupported_disk_format'] == ['ploop']
    image = tmp_path / 'files' / 'nova-imgtype-unsupported.ploop'
    assert conf['imgtype']['unsupported_image_file'] == [str(image)]
    assert image.stat().st_size == 1024 * 1024
    assert conf['compute']['image_ref'] == ['x']


def test_test_config_lets_the_scenario_convert_what_qemu_img_writes(
        tmp_path):
    (tmp_path / 'tempest.conf').write_text('')
    _run(tmp_path, '''
        ENABLED_SERVICES=tempest
        NOVA_IMGTYPE_TEMPEST_UNSUPPORTED_DISK_FORMAT=vhdx
        source "$SETTINGS"
        source "$PLUGIN" stack test-config
        ''')
    conf = _ini(tmp_path / 'tempest.conf')
    assert conf['imgtype']['unsupported_disk_format'] == ['vhdx']
    assert 'unsupported_image_file' not in conf['imgtype']


def test_test_config_without_tempest_does_nothing(tmp_path):
    _run(tmp_path, '''
        ENABLED_SERVICES=n-cpu
        source "$SETTINGS"
        source "$PLUGIN" stack test-config
        source "$PLUGIN" unstack
        ''')
    assert not (tmp_path / 'tempest.conf').exists()


def test_install_puts_the_package_with_pip_and_the_shim_in_nova(tmp_path):
    nova_dir = tmp_path / 'nova'
    (nova_dir / 'nova' / 'virt').mkdir(parents=True)
    python = tmp_path / 'python'
    # $PYTHON: Nova imports from $NOVA_DIR, and everything imports.
    python.write_text(textwrap.dedent('''\
        #!/bin/bash
        echo "$*" >> "$WORK/python.log"
        if [[ "$*" == *nova.virt.__file__* ]]; then
            echo "$NOVA_DIR/nova/virt"
        fi
        '''))
    python.chmod(0o755)
    _run(tmp_path, '''
        ENABLED_SERVICES=n-cpu
        NOVA_IMGTYPE_DIR=$ROOT
        function pip_install {
            echo "$*" > "$WORK/pip.args"
            ls -A "${@: -1}" > "$WORK/pip.src"
        }
        source "$SETTINGS"
        source "$PLUGIN" stack install
        ''', env={'PYTHON': str(python), 'NOVA_DIR': str(nova_dir)})
    args = (tmp_path / 'pip.args').read_text().split()
    assert args[0] == '--no-deps'
    src = pathlib.Path(args[1])
    listed = (tmp_path / 'pip.src').read_text().split()
    assert 'nova' not in listed
    assert {'nova_imgtype', 'setup.cfg', 'pyproject.toml',
            'requirements.txt', 'README.rst'} <= set(listed)
    assert not src.exists(), 'the temporary copy is removed'
    shim = nova_dir / 'nova' / 'virt' / 'imgtype' / '__init__.py'
    assert shim.read_text() == (
        ROOT / 'nova' / 'virt' / 'imgtype' / '__init__.py').read_text()
    assert 'nova.virt.imgtype' in (tmp_path / 'python.log').read_text()


def test_install_refuses_a_nova_outside_nova_dir(tmp_path):
    python = tmp_path / 'python'
    python.write_text('#!/bin/bash\necho /usr/lib/python3/nova/virt\n')
    python.chmod(0o755)
    result = _run(tmp_path, '''
        ENABLED_SERVICES=n-cpu
        NOVA_IMGTYPE_DIR=$ROOT
        function pip_install { :; }
        source "$SETTINGS"
        source "$PLUGIN" stack install
        ''', env={'PYTHON': str(python), 'NOVA_DIR': str(tmp_path / 'nova')},
        check=False)
    assert result.returncode != 0
    assert 'not from devstack' in result.stderr


def test_clean_undefines_only_the_plugins_dir_pools(tmp_path):
    (tmp_path / 'files').mkdir()
    (tmp_path / 'files' / 'nova-imgtype-unsupported.ploop').write_text('')
    _run(tmp_path, '''
        ENABLED_SERVICES=n-cpu
        function sudo { "$@"; }
        function virsh {
            case $1 in
                pool-list) printf '%s\\n' nova-base-images-pool \\
                    nova-disks-pool nova-disks-pool-logical default \\
                    nova-disks-pool-x1 ;;
                pool-dumpxml)
                    if [[ $2 == *logical ]]; then echo "<pool type='logical'>"
                    else echo "<pool type='dir'>"; fi ;;
                *) echo "$*" >> "$WORK/virsh.log" ;;
            esac
        }
        source "$SETTINGS"
        source "$PLUGIN" clean
        ''')
    assert (tmp_path / 'virsh.log').read_text().splitlines() == [
        'pool-destroy nova-base-images-pool',
        'pool-undefine nova-base-images-pool',
        'pool-destroy nova-disks-pool',
        'pool-undefine nova-disks-pool',
    ]
    assert not (tmp_path / 'files' / 'nova-imgtype-unsupported.ploop').exists()
