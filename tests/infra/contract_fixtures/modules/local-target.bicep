// A local module the fixtures call: its declared parameters are its contract.
@allowed([
  'S'
  'M'
])
param size string = 'S'

@minValue(1)
param count int = 1

param required string

output echo string = '${size}-${count}-${required}'
