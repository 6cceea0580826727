# shellcheck shell=bash
# What the offline kind scripts ask of this machine (sourced, not run).

# lacks_sys_resource: true when CAP_SYS_RESOURCE (bit 24) is missing from the bounding set, the
# quirk runc-without-sys-resource works around.
lacks_sys_resource() {
  local bounding
  bounding="$(awk '/^CapBnd:/ { print $2 }' /proc/self/status)"
  (( (16#$bounding >> 24 & 1) == 0 ))
}
