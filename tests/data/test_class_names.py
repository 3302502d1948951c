from keras_vit.data import imagenet2012_class_names


def test_names_follow_the_synset_order_of_the_official_heads():
    synsets = imagenet2012_class_names(synsets=True)
    names = imagenet2012_class_names()
    assert len(synsets) == len(names) == 1000
    assert synsets == sorted(synsets) and len(set(synsets)) == 1000
    # well-known indices of the ILSVRC-2012 label order
    assert (names[0], names[1], names[207], names[281], names[409]) == (
        "tench", "goldfish", "golden retriever", "tabby", "analog clock")
    assert synsets[281] == "n02123045"
    assert all(name and "\t" not in name and "," not in name for name in names)
