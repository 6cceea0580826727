-- Argo CD health check for initializer.dev/Initializer, in Argo CD's resource-customization
-- format: copy it into argocd-cm as resource.customizations.health.initializer.dev_Initializer.
-- It reads the conditions every Initializer carries: Ready, Reconciling and Stalled (exactly one
-- True), and judges a status older than the spec as still progressing.
local hs = {}
if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "the operator has not written a status yet"
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "the operator has not acted on this generation of the spec yet"
  return hs
end
for _, condition in ipairs(obj.status.conditions or {}) do
  if condition.status == "True" then
    if condition.type == "Stalled" then
      hs.status = "Degraded"
      hs.message = condition.message
      return hs
    elseif condition.type == "Reconciling" then
      hs.status = "Progressing"
      hs.message = condition.message
      return hs
    elseif condition.type == "Ready" then
      if condition.reason == "Suspended" then
        hs.status = "Suspended"
      else
        hs.status = "Healthy"
      end
      hs.message = condition.message
      return hs
    end
  end
end
hs.status = "Progressing"
hs.message = "waiting for the Ready condition"
return hs
