#!/usr/bin/env bash
# Checks the module layering README.md describes (its test_layering paragraph; docs/tour.md
# walks the modules): a module may include headers of its own module and of the modules
# listed below it, nothing else.
#
#   base                                    (no other module)
#   comm     base                           ring collectives, transports, rendezvous
#   launch   base comm                      ringzero as its own launcher (starts the ranks)
#   kernels  base                           CPU and CUDA kernels
#   data     base                           shards, loader, tokenizers
#   model    base kernels                   GPT-2 over the kernels
#   zero     base comm kernels model        strategies, buckets, memory accounting
#   viz      base comm kernels zero         pictures (gnuplot), the --trace timeline, the ring example
#   train    base comm launch kernels data  the trainer: config, loop, checkpoints, metrics, and
#            model zero viz                 the one rank setup (train/rank_setup.h: launch or become a rank)
#   cli      every module above             the ringzero executable: one file per subcommand
#
# tests/ and bench/ may include anything. An include that climbs out with "../" is refused
# too, since it would slip past this check. Usage: check-layering.sh [REPO_ROOT]; prints
# one line per offending include (FILE:LINE) and exits 1 when there is any.
set -euo pipefail
root=${1:-"$(dirname "$0")/.."}

declare -A allowed=(
  [base]=""
  [comm]="base"
  [launch]="base comm"
  [kernels]="base"
  [data]="base"
  [model]="base kernels"
  [zero]="base comm kernels model"
  [viz]="base comm kernels zero"
  [train]="base comm launch kernels data model zero viz"
  [cli]="base comm launch kernels data model zero viz train"
)

bad=0
for module in "${!allowed[@]}"; do
  [ -d "$root/$module" ] || continue
  while IFS= read -r hit; do
    file=${hit%%:*}
    rest=${hit#*:}
    line=${rest%%:*}
    text=${rest#*:}
    target=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]*)".*/\1/' <<<"$text")
    if [[ $target == *../* ]]; then
      echo "${file#"$root"/}:$line: $module includes \"$target\": no \"../\" includes (name the header from the repository root)"
      bad=1
      continue
    fi
    dep=${target%%/*}
    [ "$dep" = "$target" ] && continue             # a file next to it, not a module's header
    [ -n "${allowed[$dep]+set}" ] || continue      # not a module (a third-party path)
    [ "$dep" = "$module" ] && continue
    case " ${allowed[$module]} " in *" $dep "*) continue ;; esac
    echo "${file#"$root"/}:$line: $module includes \"$target\", but $dep is not below $module" \
         "(${module} may include: ${allowed[$module]:-nothing else})"
    bad=1
  done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$root/$module" \
             --include='*.h' --include='*.hpp' --include='*.cpp' --include='*.cu' --include='*.cuh' || true)
done
exit "$bad"
